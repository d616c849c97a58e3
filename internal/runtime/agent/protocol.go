// Package agent is the agent loop that `agent-runner agent-run` runs inside a
// per-message sandbox: one JSON Request on stdin, one JSON Reply on stdout.
package agent

import (
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
)

// Message is the inbound message.
type Message struct {
	ID             string `json:"id"`
	Text           string `json:"text"`
	Sender         string `json:"sender,omitempty"`
	Channel        string `json:"channel,omitempty"`
	ConversationID string `json:"conversation_id,omitempty"`
}

// Request is what agent-run reads on stdin.
type Request struct {
	AgentID              string              `json:"agent_id"`
	Message              Message             `json:"message"`
	LLM                  agentspec.LLMConfig `json:"llm"`
	InjectCredentialsEnv bool                `json:"inject_credentials_env"`
	RedactSecrets        bool                `json:"redact_secrets"`
	// Brokered are the message's bound secrets as its tools know them: a
	// placeholder each, in the variable of the secret's name. No secret
	// value is ever in a request: the egress proxy adds a bound one on
	// its way to a bound host.
	Brokered []Brokered `json:"brokered,omitempty"`
	// EgressCA is the PEM of the agent's egress CA, which the proxy signs
	// bound hosts' certificates with; the tools trust it (egressca.go).
	EgressCA string `json:"egress_ca,omitempty"`
	// EgressSocket is the unix socket of the runner's broker in the
	// sandbox (a network = "bridge" container): agent-run serves it to the
	// tools on a loopback port and points their proxy variables there.
	EgressSocket string `json:"egress_socket,omitempty"`
	// Env is extra environment for tool processes.
	Env map[string]string `json:"env,omitempty"`
	// MaxSteps bounds the model turns; 0 means 8, at most 100.
	MaxSteps int `json:"max_steps,omitempty"`
	// Role is the agent's ThreeGate role (RoleCore, RoleFetch, RoleToolExec)
	// as the runner's config says, never the model: it decides which tools
	// exist (RoleTools). Empty keeps the tools of an agent without a role.
	Role string `json:"role,omitempty"`
	// Asks are the agents this one may ask (CORE only), by id and role; the
	// runner routes each ask, through the relay, to the target's runner.
	Asks []AskTarget `json:"asks,omitempty"`
	// Relay, when set, carries every LLM call to the runner's relay; LLM's
	// APIKey is then this message's relay token, never the real key.
	Relay *Relay `json:"relay,omitempty"`
	// Seed, when set, is applied to the workspace before the loop (see
	// Seed). It is not secret, but it is the agent's instructions: like
	// the message text, it is never logged.
	Seed *agentspec.Seed `json:"seed,omitempty"`
}

// Brokered is one bound secret of a message, as its tools see it.
type Brokered struct {
	Name        string `json:"name"`
	Placeholder string `json:"placeholder"`
	agentspec.SecretBinding
}

// AskTarget is an agent the ask tool may reach.
type AskTarget struct {
	AgentID string `json:"agent_id"`
	Role    string `json:"role"`
}

// ToolCall is one tool invocation inside a step.
type ToolCall struct {
	Name     string `json:"name"`
	Input    string `json:"input"`
	Output   string `json:"output"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Step is one LLM turn and the tool calls it asked for.
type Step struct {
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// Usage counts tokens as the provider reported them.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Error kinds in Reply.ErrorKind and in the runner's HTTP errors.
const (
	ErrKindLLM      = "llm"      // the model endpoint failed or refused
	ErrKindRequest  = "request"  // the stdin request was malformed
	ErrKindSteps    = "steps"    // max_steps reached without a final answer
	ErrKindInternal = "internal" // anything else inside the loop
	// ErrKindWorkspace: the workspace is missing, not a directory, or not
	// writable by agent-run's uid (memory.db cannot be kept).
	ErrKindWorkspace = "workspace"
	// Set by the runner, never by agent-run itself:
	ErrKindOOM      = "oom"      // the sandbox was OOM-killed
	ErrKindTimeout  = "timeout"  // timeout_seconds passed
	ErrKindExit     = "exit"     // the sandbox exited non-zero without a reply
	ErrKindProtocol = "protocol" // stdout was not one JSON Reply
	ErrKindSandbox  = "sandbox"  // the sandbox could not be made (e.g. Landlock missing)
)

// Reply is what agent-run writes on stdout.
type Reply struct {
	MessageID  string `json:"message_id"`
	Reply      string `json:"reply"`
	Steps      []Step `json:"steps,omitempty"`
	Usage      Usage  `json:"usage"`
	DurationMS int64  `json:"duration_ms"`
	// ToolsRefused counts tool calls outside the agent's role.
	ToolsRefused int    `json:"tools_refused,omitempty"`
	ErrorKind    string `json:"error_kind,omitempty"`
	Error        string `json:"error,omitempty"`
	// Final is set by agent-run running as its container's init when it
	// found no process of the container killed for memory: it exits 0
	// right after this line, so the runner may answer without waiting for
	// the daemon to report the exit (see agentspec.FinalReply).
	Final bool `json:"final,omitempty"`
}

// RedactReply scrubs every text field of a reply in place: the loop does
// it when redact_secrets is on, and the runner again on the reply it gets.
func RedactReply(r *redact.Redactor, rep *Reply) {
	rep.Reply = r.String(rep.Reply)
	rep.Error = r.String(rep.Error)
	for i := range rep.Steps {
		st := &rep.Steps[i]
		st.Text = r.String(st.Text)
		for j := range st.ToolCalls {
			tc := &st.ToolCalls[j]
			tc.Input = r.String(tc.Input)
			tc.Output = r.String(tc.Output)
			tc.Error = r.String(tc.Error)
		}
	}
}
