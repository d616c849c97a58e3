package agentspec

import (
	"fmt"
	"regexp"
	"slices"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// LLMConfig says which model answers and how to reach it.
type LLMConfig struct {
	// Provider is "openai" (any OpenAI-compatible chat completions endpoint),
	// "anthropic", or "offline" (the embedded deterministic responder).
	Provider string `json:"provider"`
	// Model is required for openai and anthropic.
	Model string `json:"model,omitempty"`
	// BaseURL is the API root. For openai it includes the version path, as
	// the OpenAI SDKs take it (http://ollama:11434/v1; default
	// https://api.openai.com/v1/); for anthropic it does not (default
	// https://api.anthropic.com/; the SDK adds v1/messages). LLM calls honour
	// HTTP(S)_PROXY in agent-run's environment.
	BaseURL string `json:"base_url,omitempty"`
	// APIKey is the provider's key in the runner's config. The runner never
	// hands it to agent-run: the request carries a relay token here instead
	// (see agent.Request.Relay).
	APIKey string `json:"api_key,omitempty"`
	// MaxTokens bounds each model answer; 0 is the provider default
	// (Anthropic requires one: DefaultAnthropicMaxTokens).
	MaxTokens int `json:"max_tokens,omitempty"`
}

// Provider names in LLMConfig.Provider.
const (
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
	ProviderOffline   = "offline"
)

// Providers lists the accepted LLMConfig.Provider values.
var Providers = []string{ProviderOpenAI, ProviderAnthropic, ProviderOffline}

// Each provider's API root when LLMConfig.BaseURL is empty. The Anthropic
// SDK appends v1/messages; an OpenAI root carries its version path.
const (
	DefaultAnthropicBaseURL = "https://api.anthropic.com/"
	DefaultOpenAIBaseURL    = "https://api.openai.com/v1/"
)

// DefaultAnthropicMaxTokens: the Messages API requires max_tokens.
const DefaultAnthropicMaxTokens = 4096

// The loop's step bounds.
const (
	// DefaultMaxSteps applies when a config's (or request's) max_steps is 0.
	DefaultMaxSteps = 8
	// MaxMaxSteps bounds what a config may ask for.
	MaxMaxSteps = 100
)

// ThreeGate roles, as meepa_agent's threegate.role names them.
const (
	RoleCore     = "core"
	RoleFetch    = "fetch"
	RoleToolExec = "tool_exec"
)

// Roles lists the accepted role values besides "".
var Roles = []string{RoleCore, RoleFetch, RoleToolExec}

// CheckRole refuses a role that is neither "" nor one of Roles: the
// runner's config check and the loop's tool choice (agent.RoleTools) say
// it in the same words.
func CheckRole(role string) error {
	if role == "" || slices.Contains(Roles, role) {
		return nil
	}
	return fmt.Errorf("role %q is not one of %v", role, Roles)
}

// ThreeGateRole is an agent's role as package topology and the pod labels
// name it ("tool_exec" is TOOL_EXEC); "" stays "".
func ThreeGateRole(role string) string {
	return map[string]string{
		RoleCore: topospec.RoleCore, RoleFetch: topospec.RoleFetch, RoleToolExec: topospec.RoleToolExec,
	}[role]
}

// CheckAskRole says why a core agent may not ask an agent of this role,
// or nil: it asks fetch and tool_exec agents only (depth one). One text
// for a target deployed on Docker, in a cluster, or planned in the run.
func CheckAskRole(role string) error {
	if role == RoleFetch || role == RoleToolExec {
		return nil
	}
	if role == "" {
		role = "none"
	}
	return fmt.Errorf("a core agent asks only fetch and tool_exec agents; this one's role is %q", role)
}

// NeedsRelay says whether a config's messages use the runner's LLM relay:
// a model provider, agents to ask, or a key the loop must keep out of the
// workspace without holding it (the scrub route; an offline agent may
// still be given one). Only then is a sandbox connected to it.
func NeedsRelay(c *Config) bool {
	return c.LLM.Provider == ProviderOpenAI || c.LLM.Provider == ProviderAnthropic || len(c.Ask) > 0 || c.LLM.APIKey != ""
}

// SeedOf is the seed a runner sends with every message: a cluster
// config's (Kubernetes.Seed), else none.
func SeedOf(c *Config) *Seed {
	if c.Kubernetes == nil {
		return nil
	}
	return c.Kubernetes.Seed
}

// Seed is what a workspace starts with where the provider cannot write it
// itself: on a cluster the workspace is a claim only the message pods
// mount, so the runner sends its agent's soul and memory with every
// message and agent-run applies workspace.Ensure's rules to /workspace:
// SOUL.md and MEMORY.md written when missing, skills/ made, SOUL.md
// rewritten when ManageSoul and it differs. On Docker the provider writes
// the workspace and sends no seed.
type Seed struct {
	Soul       string `json:"soul"`
	Memory     string `json:"memory"`
	ManageSoul bool   `json:"manage_soul"`
}

// EnvNamePattern is what a tool environment variable's name must look like.
var EnvNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedToolEnv are the names the sandbox fixes for every tool process:
// HOME and TMPDIR are the workspace and the private temp dir that the
// isolation model promises, and PATH and the dynamic loader's variables
// decide which code runs. An env entry or a secret may not replace them.
var reservedToolEnv = map[string]bool{
	"HOME": true, "TMPDIR": true, "PATH": true,
	"LD_PRELOAD": true, "LD_LIBRARY_PATH": true, "LD_AUDIT": true,
}

// CheckToolEnvName says why k cannot name a tool environment variable, or
// nil. The loop refuses such a name on every message; the provider calls
// this at plan time so a bad name fails the plan instead.
func CheckToolEnvName(k string) error {
	switch {
	case !EnvNamePattern.MatchString(k):
		return fmt.Errorf("%q is not an environment variable name (%s)", k, EnvNamePattern)
	case reservedToolEnv[k]:
		return fmt.Errorf("%q is fixed by the sandbox for every tool process and cannot be set", k)
	}
	return nil
}

// Deployment modes of a Docker host's runner: the provider runs it as a
// container, or an operator runs it (e.g. from a systemd unit). On a
// cluster the runner is always a Deployment the provider manages.
const (
	ModeContainer = "container"
	ModeExternal  = "external"
	// DefaultMode is the deployment when none is chosen.
	DefaultMode = ModeContainer
)

// Modes lists the deployment modes, for validators and docs.
var Modes = []string{ModeContainer, ModeExternal}
