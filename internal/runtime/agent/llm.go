package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Client is one LLM provider seen by the loop. The loop never knows which
// vendor answers: it sends the whole conversation each turn (the providers
// here are stateless chat APIs) and gets back text, tool calls, or both.
type Client interface {
	Complete(ctx context.Context, req Completion) (Answer, error)
}

// Role of a ChatMessage.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	// RoleTool carries the results of the previous assistant turn's tool
	// calls.
	RoleTool = "tool"
)

// ChatMessage is one entry of the conversation in a provider-neutral form.
type ChatMessage struct {
	Role string
	Text string
	// ToolCalls are set on assistant messages that asked for tools.
	ToolCalls []ToolUse
	// ToolResults are set on RoleTool messages, one per ToolCalls entry of
	// the assistant message before, in the same order.
	ToolResults []ToolResult
}

// ToolUse is a model's request to run one tool.
type ToolUse struct {
	ID    string
	Name  string
	Input json.RawMessage
}

// ToolResult is what a tool returned, addressed to a ToolUse by ID.
type ToolResult struct {
	ID   string
	Name string
	// Content is the tool's output (for the shell, stdout and stderr).
	Content string
	// Error says why the tool failed; empty when it did its job (a shell
	// command that exits non-zero did its job).
	Error string
	// ExitCode is set for the shell tool when the command ran.
	ExitCode *int
}

// IsError reports whether the tool failed.
func (r ToolResult) IsError() bool { return r.Error != "" }

// Text is the result as the model reads it: the exit code and error, when
// there are, on their own lines before the output.
func (r ToolResult) Text() string {
	var b strings.Builder
	if r.ExitCode != nil {
		fmt.Fprintf(&b, "exit_code: %d\n", *r.ExitCode)
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "error: %s\n", r.Error)
	}
	b.WriteString(r.Content)
	return b.String()
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string
	Description string
	// Parameters is a JSON Schema object.
	Parameters map[string]any
}

// Completion is one request to the model.
type Completion struct {
	System   string
	Messages []ChatMessage
	Tools    []ToolSpec
}

// Answer is the model's turn.
type Answer struct {
	Text      string
	ToolCalls []ToolUse
	Usage     Usage
}
