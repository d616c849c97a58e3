package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/shared"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// OpenAI talks to any OpenAI-compatible chat completions endpoint
// (POST <base_url>/chat/completions) with function tools, through the
// official SDK.
type OpenAI struct {
	chat  openai.ChatService
	model string
	max   int
}

// NewOpenAI builds the client. It builds the chat service alone, without
// openai.NewClient's defaults, so OPENAI_* variables in agent-run's
// environment cannot redirect it or add headers.
func NewOpenAI(cfg agentspec.LLMConfig, hc *http.Client) (*OpenAI, error) {
	if cfg.Model == "" {
		return nil, errors.New("llm.model is required for provider openai")
	}
	base := cfg.BaseURL
	if base == "" {
		base = agentspec.DefaultOpenAIBaseURL
	}
	if hc == nil {
		hc = &http.Client{}
	}
	chat := openai.NewChatService(
		option.WithBaseURL(base),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(hc),
	)
	return &OpenAI{chat: chat, model: cfg.Model, max: cfg.MaxTokens}, nil
}

// Complete implements Client.
func (o *OpenAI) Complete(ctx context.Context, c Completion) (Answer, error) {
	params := openai.ChatCompletionNewParams{Model: o.model} // shared.ChatModel is an alias of string
	if o.max > 0 {
		// max_completion_tokens, not max_tokens: OpenAI's reasoning models
		// refuse max_tokens, and the compatible servers that know only
		// max_tokens ignore a field they do not know.
		params.MaxCompletionTokens = openai.Int(int64(o.max))
	}
	if c.System != "" {
		params.Messages = append(params.Messages, openai.SystemMessage(c.System))
	}
	for _, m := range c.Messages {
		switch m.Role {
		case RoleUser:
			params.Messages = append(params.Messages, openai.UserMessage(m.Text))
		case RoleAssistant:
			if len(m.ToolCalls) == 0 {
				params.Messages = append(params.Messages, openai.AssistantMessage(m.Text))
				continue
			}
			am := &openai.ChatCompletionAssistantMessageParam{}
			if m.Text != "" {
				am.Content.OfString = openai.String(m.Text)
			}
			for _, tc := range m.ToolCalls {
				am.ToolCalls = append(am.ToolCalls, openai.ChatCompletionMessageToolCallParam{
					ID:       tc.ID,
					Function: openai.ChatCompletionMessageToolCallFunctionParam{Name: tc.Name, Arguments: string(tc.Input)},
				})
			}
			params.Messages = append(params.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: am})
		case RoleTool:
			for _, r := range m.ToolResults {
				params.Messages = append(params.Messages, openai.ToolMessage(r.Text(), r.ID))
			}
		}
	}
	for _, t := range c.Tools {
		params.Tools = append(params.Tools, openai.ChatCompletionToolParam{Function: shared.FunctionDefinitionParam{
			Name:        t.Name,
			Description: openai.String(t.Description),
			Parameters:  shared.FunctionParameters(t.Parameters),
		}})
	}
	resp, err := o.chat.Completions.New(ctx, params)
	if err != nil {
		return Answer{}, openaiError(err)
	}
	if len(resp.Choices) == 0 {
		return Answer{}, errors.New("openai: the answer has no choices")
	}
	msg := resp.Choices[0].Message
	ans := Answer{
		Text:  msg.Content,
		Usage: Usage{InputTokens: int(resp.Usage.PromptTokens), OutputTokens: int(resp.Usage.CompletionTokens)},
	}
	if ans.Text == "" && msg.Refusal != "" {
		ans.Text = msg.Refusal
	}
	for _, tc := range msg.ToolCalls {
		ans.ToolCalls = append(ans.ToolCalls, ToolUse{ID: tc.ID, Name: tc.Function.Name, Input: json.RawMessage(tc.Function.Arguments)})
	}
	return ans, nil
}

// openaiError keeps what a person needs: the status and the endpoint's own
// message (the SDK's text also carries the whole request URL and body).
func openaiError(err error) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		msg := apiErr.Message
		if msg == "" {
			msg = bounded(apiErr.RawJSON(), 1024)
		}
		return fmt.Errorf("openai: %d %s: %s", apiErr.StatusCode, http.StatusText(apiErr.StatusCode), msg)
	}
	return fmt.Errorf("openai: %w", err)
}

func bounded(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
