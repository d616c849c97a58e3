package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// Anthropic talks to the Messages API (POST <base_url>/v1/messages) with
// tool use, through the official SDK.
type Anthropic struct {
	client anthropic.Client
	model  string
	max    int
}

// NewAnthropic builds the client without the SDK's environment defaults:
// those read ANTHROPIC_* variables and profile files under the config
// directory, and HOME here is the agent's own workspace, which a tool could
// have written to steer the next run's credentials or base URL.
func NewAnthropic(cfg agentspec.LLMConfig, hc *http.Client) (*Anthropic, error) {
	if cfg.Model == "" {
		return nil, errors.New("llm.model is required for provider anthropic")
	}
	base := cfg.BaseURL
	if base == "" {
		base = agentspec.DefaultAnthropicBaseURL
	}
	if hc == nil {
		hc = &http.Client{}
	}
	max := cfg.MaxTokens
	if max <= 0 {
		max = agentspec.DefaultAnthropicMaxTokens
	}
	c := anthropic.NewClient(
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(base),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(hc),
	)
	return &Anthropic{client: c, model: cfg.Model, max: max}, nil
}

// Complete implements Client.
func (a *Anthropic) Complete(ctx context.Context, c Completion) (Answer, error) {
	params := anthropic.MessageNewParams{
		Model:     a.model, // anthropic.Model is an alias of string
		MaxTokens: int64(a.max),
	}
	if c.System != "" {
		params.System = []anthropic.TextBlockParam{{Text: c.System}}
	}
	for _, m := range c.Messages {
		switch m.Role {
		case RoleUser:
			params.Messages = append(params.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(nonEmpty(m.Text))))
		case RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if m.Text != "" || len(m.ToolCalls) == 0 {
				blocks = append(blocks, anthropic.NewTextBlock(nonEmpty(m.Text)))
			}
			for _, tc := range m.ToolCalls {
				input := tc.Input
				if !json.Valid(input) {
					input = json.RawMessage("{}")
				}
				blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, input, tc.Name))
			}
			params.Messages = append(params.Messages, anthropic.NewAssistantMessage(blocks...))
		case RoleTool:
			var blocks []anthropic.ContentBlockParamUnion
			for _, r := range m.ToolResults {
				blocks = append(blocks, anthropic.NewToolResultBlock(r.ID, nonEmpty(r.Text()), r.IsError()))
			}
			params.Messages = append(params.Messages, anthropic.NewUserMessage(blocks...))
		}
	}
	for _, t := range c.Tools {
		schema := anthropic.ToolInputSchemaParam{Properties: t.Parameters["properties"]}
		if req, ok := t.Parameters["required"].([]string); ok {
			schema.Required = req
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
			Name:        t.Name,
			Description: anthropic.String(t.Description),
			InputSchema: schema,
		}})
	}
	msg, err := a.client.Messages.New(ctx, params)
	if err != nil {
		return Answer{}, anthropicError(err)
	}
	ans := Answer{Usage: Usage{InputTokens: int(msg.Usage.InputTokens), OutputTokens: int(msg.Usage.OutputTokens)}}
	var text []string
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text = append(text, b.Text)
		case "tool_use":
			ans.ToolCalls = append(ans.ToolCalls, ToolUse{ID: b.ID, Name: b.Name, Input: b.Input})
		}
	}
	ans.Text = strings.Join(text, "\n")
	return ans, nil
}

// nonEmpty: the Messages API rejects empty text blocks.
func nonEmpty(s string) string {
	if s == "" {
		return "(empty)"
	}
	return s
}

// anthropicError keeps the status and the API's own message.
func anthropicError(err error) error {
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		raw := apiErr.RawJSON()
		var body struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		msg := bounded(raw, 1024)
		if json.Unmarshal([]byte(raw), &body) == nil && body.Error.Message != "" {
			msg = body.Error.Message
			if body.Error.Type != "" {
				msg = body.Error.Type + ": " + msg
			}
		}
		return fmt.Errorf("anthropic: %d %s: %s", apiErr.StatusCode, http.StatusText(apiErr.StatusCode), msg)
	}
	return fmt.Errorf("anthropic: %w", err)
}
