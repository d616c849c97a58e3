package agentspec

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

// Defaults and bounds of the settings an agent's owner chooses. The zero
// value of a Config field means its default; the provider's schema writes
// the defaults out and its docs quote them, from these constants.
const (
	// DefaultNetwork is the spec's container_mode.network. An empty Network
	// in a config file means "none" (fail closed); the provider writes the
	// spec's default explicitly.
	DefaultNetwork = "bridge"
	// DefaultRuntime is the OCI runtime every daemon has.
	DefaultRuntime = "runc"

	// The relay's bounds on spending (LLMLimits). The defaults are far above
	// what an agent answering messages uses (a message of DefaultMaxSteps
	// steps with a long context stays in the hundreds of thousands of
	// tokens) and low enough that a loop gone wrong, or a sandbox spending
	// on purpose, stops within a day's budget.
	DefaultMaxTokensPerCall         = 16384
	MaxMaxTokensPerCall             = 1_000_000
	DefaultMessageTokenBudget       = 2_000_000
	MaxMessageTokenBudget           = 1_000_000_000
	DefaultAgentTokenBudget         = 50_000_000
	MaxAgentTokenBudget             = 1_000_000_000_000
	DefaultAgentBudgetWindowSeconds = 86400
	MinAgentBudgetWindowSeconds     = 60
	MaxAgentBudgetWindowSeconds     = 31 * 86400
	// DefaultLoopMaxTokens is what the loop asks per call when the config
	// names no llm.max_tokens: what every model still in use accepts.
	DefaultLoopMaxTokens = DefaultAnthropicMaxTokens

	// DefaultInjectSecretsEnv is the only value inject_secrets_env still
	// takes: whatever enters a tool's environment is the tools' (a hostile
	// model prints it in any spelling, or a piece per call, which no
	// redaction catches), so secrets are brokered instead (secrets.go).
	DefaultInjectSecretsEnv = false
)

// Networks and Runtimes are the values ContainerMode.Network and Runtime
// take (besides empty).
var (
	Networks = []string{"bridge", "none"}
	Runtimes = []string{"runc", "crun", "runsc"}
)

// ValidateSettings is the one check of what an owner sets: the provider's
// plan runs it on the config it would write, and the runner runs it at start
// (Validate). A zero value is its default and passes. Each error is a
// *fault.FieldError; several are joined.
func ValidateSettings(c *Config) error {
	var errs []error
	field := func(name string, err error) {
		if err != nil {
			errs = append(errs, &fault.FieldError{Field: name, Index: -1, Err: err})
		}
	}
	cm := c.Container
	field("container_mode.memory_limit", checkMemory(cm))
	if _, err := UserFor(c.AgentID, cm.User); err != nil {
		field("container_mode.user", err)
	}
	if t := cm.TimeoutSeconds; t < 0 || t > MaxTimeoutSeconds {
		field("container_mode.timeout_seconds", fmt.Errorf("must be between 1 and %d, got %d", MaxTimeoutSeconds, t))
	}
	if p := cm.PidsLimit; p != 0 && (p < MinPidsLimit || p > MaxPidsLimit) {
		field("container_mode.pids_limit", fmt.Errorf("must be between %d and %d, got %d", MinPidsLimit, MaxPidsLimit, p))
	}
	if len(cm.Networks) == 0 {
		field("container_mode.network", checkNetwork(cm.Network))
	}
	if cm.Runtime != "" && !slices.Contains(Runtimes, cm.Runtime) {
		field("container_mode.runtime", fmt.Errorf("%q is not one of %s", cm.Runtime, strings.Join(Runtimes, ", ")))
	}
	if c.MaxSteps < 0 || c.MaxSteps > MaxMaxSteps {
		field("max_steps", fmt.Errorf("must be between 1 and %d, got %d", MaxMaxSteps, c.MaxSteps))
	}
	errs = append(errs, c.LLMLimits.validate()...)
	errs = append(errs, unjoin(ValidateFileAccess(c.FileAccess))...)
	// No secret value enters a sandbox any more: a tool gets a bound
	// secret's placeholder, and nothing of an unbound one.
	if c.InjectSecretsEnv {
		field("inject_secrets_env", errors.New("secrets no longer enter a sandbox, where a hostile tool could send them anywhere in any "+
			"spelling; bind each to the hosts it is for with secret_bindings (the tools get a placeholder, the egress proxy adds the "+
			"value on the way to those hosts only), and remove inject_secrets_env"))
	}
	var names []string // nil: the secrets are not known (a plan with unknown ones)
	if c.Secrets != nil {
		names = slices.Sorted(maps.Keys(c.Secrets))
		if names == nil {
			names = []string{} // known to be none
		}
	}
	for _, e := range CheckSecretBindings(c.SecretBindings, names, c) {
		errs = append(errs, e)
	}
	if c.EgressUpstreamCA != "" {
		if _, err := proxy.ParseUpstreamCA(c.EgressUpstreamCA); err != nil {
			field("egress_upstream_ca", err)
		} else if broker, _ := BrokerOf(c); broker != BrokerRunner || len(c.SecretBindings) == 0 {
			field("egress_upstream_ca", errors.New("only the runner's own broker (a host-mode or network = \"bridge\" agent with secret_bindings) reads it; "+
				"a fetch agent's bound hosts are verified with its topology's proxy.upstream_ca"))
		}
	}
	for _, k := range BoundSecretNames(c) {
		// A header cannot carry these; the proxy would refuse the binding
		// on every message.
		if v, ok := c.Secrets[k]; ok && strings.ContainsAny(v, "\r\n\x00") {
			errs = append(errs, &fault.FieldError{Field: "secrets", Index: -1, Key: k, Summary: "Invalid Secret Binding",
				Err: errors.New("a bound secret is sent in a header, which cannot hold a line break or NUL")})
		}
	}
	return errors.Join(errs...)
}

// checkMemory bounds memory_limit (parsed already): Docker's minimum, and
// in host mode more, since the limit also bounds the agent-runner child
// itself.
func checkMemory(cm ContainerMode) error {
	n := MemoryOrDefault(cm.MemoryLimit).Bytes()
	if n < MinMemoryBytes {
		return fmt.Errorf("%q is below Docker's minimum of %s", cm.MemoryLimit, MinMemoryLimitText)
	}
	if !cm.Enabled && n < MinHostMemory {
		return fmt.Errorf("%q is below %s, the least the agent loop starts with in host mode (container_mode.enabled = false)",
			cm.MemoryLimit, MinHostMemoryText)
	}
	return nil
}

// checkNetwork accepts the spec's network modes (empty reads as "none") and
// explains why "host" is refused.
func checkNetwork(v string) error {
	switch {
	case v == "" || slices.Contains(Networks, v):
		return nil
	case v == "host":
		return errors.New("\"host\" would put the per-message container in the host's network namespace: the agent could " +
			"reach every service listening on the host (including ones bound to 127.0.0.1) and its traffic would " +
			"bypass Docker's and ThreeGate's isolation. Use \"bridge\" for outbound access, \"none\" for no network, " +
			"or a threegate block for the ThreeGate topology")
	default:
		return fmt.Errorf("%q is not a container network mode; use one of %s", v, strings.Join(Networks, ", "))
	}
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// LLMLimits bound what the relay forwards for an agent: the answer one call
// may ask for, and the tokens (input and output, as the endpoint reports
// them) one message, and the agent over a window, may spend. A zero field is
// its default. They sit under llm in the provider's schema, and their
// FieldErrors name that path ("llm.message_token_budget").
type LLMLimits struct {
	// MaxTokensPerCall is the most a relayed request may ask for in
	// max_tokens, max_completion_tokens or max_output_tokens; a request that
	// names none of them is refused too.
	MaxTokensPerCall int64 `json:"max_tokens_per_call,omitempty"`
	// MessageTokenBudget: once a message's calls have used this many
	// tokens, its next call is refused.
	MessageTokenBudget int64 `json:"message_token_budget,omitempty"`
	// AgentTokenBudget: once the agent's calls in the current window have
	// used this many tokens, every call is refused until the window ends.
	AgentTokenBudget int64 `json:"agent_token_budget,omitempty"`
	// AgentBudgetWindowSeconds is the length of that window, which starts
	// with the first call after the previous one ended (a fixed window, not
	// a sliding one). It outlives a runner restart when the config has a
	// journal directory (the count is kept there); without one it starts
	// again with the runner.
	AgentBudgetWindowSeconds int64 `json:"agent_budget_window_seconds,omitempty"`
}

// Effective is l with each zero field at its default.
func (l LLMLimits) Effective() LLMLimits {
	def := func(v, d int64) int64 {
		if v == 0 {
			return d
		}
		return v
	}
	return LLMLimits{
		MaxTokensPerCall:         def(l.MaxTokensPerCall, DefaultMaxTokensPerCall),
		MessageTokenBudget:       def(l.MessageTokenBudget, DefaultMessageTokenBudget),
		AgentTokenBudget:         def(l.AgentTokenBudget, DefaultAgentTokenBudget),
		AgentBudgetWindowSeconds: def(l.AgentBudgetWindowSeconds, DefaultAgentBudgetWindowSeconds),
	}
}

// Window is the agent budget's window.
func (l LLMLimits) Window() time.Duration {
	return time.Duration(l.Effective().AgentBudgetWindowSeconds) * time.Second
}

func (l LLMLimits) validate() []error {
	var errs []error
	check := func(name string, v, lo, hi int64) bool {
		if v != 0 && (v < lo || v > hi) {
			errs = append(errs, &fault.FieldError{Field: "llm." + name, Index: -1, Err: fmt.Errorf("must be between %d and %d, got %d", lo, hi, v)})
			return false
		}
		return true
	}
	ok := check("max_tokens_per_call", l.MaxTokensPerCall, 1, MaxMaxTokensPerCall)
	ok = check("message_token_budget", l.MessageTokenBudget, 1, MaxMessageTokenBudget) && ok
	ok = check("agent_token_budget", l.AgentTokenBudget, 1, MaxAgentTokenBudget) && ok
	ok = check("agent_budget_window_seconds", l.AgentBudgetWindowSeconds, MinAgentBudgetWindowSeconds, MaxAgentBudgetWindowSeconds) && ok
	if !ok {
		return errs
	}
	// A budget below the one it holds would refuse before the other could
	// ever apply: a typo, not a choice.
	e := l.Effective()
	if e.MessageTokenBudget < e.MaxTokensPerCall {
		errs = append(errs, &fault.FieldError{Field: "llm.message_token_budget", Index: -1,
			Err: fmt.Errorf("%d is below max_tokens_per_call (%d): a message could not finish one full answer", e.MessageTokenBudget, e.MaxTokensPerCall)})
	}
	if e.AgentTokenBudget < e.MessageTokenBudget {
		errs = append(errs, &fault.FieldError{Field: "llm.agent_token_budget", Index: -1,
			Err: fmt.Errorf("%d is below message_token_budget (%d): one message could spend the agent's whole window", e.AgentTokenBudget, e.MessageTokenBudget)})
	}
	return errs
}
