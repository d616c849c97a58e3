package provider

import (
	"context"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

type agentModel struct {
	ID                    types.String `tfsdk:"id"`
	AgentID               types.String `tfsdk:"agent_id"`
	Soul                  types.String `tfsdk:"soul"`
	Memory                types.String `tfsdk:"memory"`
	ManageSoul            types.Bool   `tfsdk:"manage_soul"`
	LLM                   types.Object `tfsdk:"llm"`
	Secrets               types.Map    `tfsdk:"secrets"`
	SecretBindings        types.Map    `tfsdk:"secret_bindings"`
	EgressUpstreamCA      types.String `tfsdk:"egress_upstream_ca"`
	InjectCredentialsEnv  types.Bool   `tfsdk:"inject_credentials_env"`
	InjectSecretsEnv      types.Bool   `tfsdk:"inject_secrets_env"`
	RedactSecrets         types.Bool   `tfsdk:"redact_secrets"`
	ContainerMode         types.Object `tfsdk:"container_mode"`
	FileAccess            types.Object `tfsdk:"file_access"`
	Threegate             types.Object `tfsdk:"threegate"`
	Egress                types.Object `tfsdk:"egress"`
	Runner                types.Object `tfsdk:"runner"`
	ForceDestroyWorkspace types.Bool   `tfsdk:"force_destroy_workspace"`
	TokenVersion          types.Int64  `tfsdk:"token_version"`

	WorkspacePath     types.String `tfsdk:"workspace_path"`
	Endpoint          types.String `tfsdk:"endpoint"`
	Token             types.String `tfsdk:"token"`
	RunnerContainerID types.String `tfsdk:"runner_container_id"`
	RunnerStatus      types.String `tfsdk:"runner_status"`
	ConfigHash        types.String `tfsdk:"config_hash"`
	LandlockABI       types.Int64  `tfsdk:"landlock_abi"`
	AgentUID          types.Int64  `tfsdk:"agent_uid"`
}

type llmModel struct {
	Provider types.String `tfsdk:"provider"`
	Model    types.String `tfsdk:"model"`
	BaseURL  types.String `tfsdk:"base_url"`
	APIKey   types.String `tfsdk:"api_key"`
	MaxSteps types.Int64  `tfsdk:"max_steps"`

	MaxTokensPerCall         types.Int64 `tfsdk:"max_tokens_per_call"`
	MessageTokenBudget       types.Int64 `tfsdk:"message_token_budget"`
	AgentTokenBudget         types.Int64 `tfsdk:"agent_token_budget"`
	AgentBudgetWindowSeconds types.Int64 `tfsdk:"agent_budget_window_seconds"`
}

type containerModeModel struct {
	Enabled        types.Bool   `tfsdk:"enabled"`
	Image          types.String `tfsdk:"image"`
	MemoryLimit    types.String `tfsdk:"memory_limit"`
	TimeoutSeconds types.Int64  `tfsdk:"timeout_seconds"`
	Network        types.String `tfsdk:"network"`
	PidsLimit      types.Int64  `tfsdk:"pids_limit"`
	User           types.String `tfsdk:"user"`
	Runtime        types.String `tfsdk:"runtime"`
	Prestart       types.Bool   `tfsdk:"prestart"`
}

type fileAccessModel struct {
	Unrestricted      types.Bool `tfsdk:"unrestricted"`
	AllowRead         types.List `tfsdk:"allow_read"`
	AllowReadWrite    types.List `tfsdk:"allow_read_write"`
	Deny              types.List `tfsdk:"deny"`
	AllowHomeDotfiles types.Bool `tfsdk:"allow_home_dotfiles"`
	AllowNetwork      types.Bool `tfsdk:"allow_network"`
}

type threegateModel struct {
	Network types.String `tfsdk:"network"`
	Role    types.String `tfsdk:"role"`
	Ask     types.List   `tfsdk:"ask"`
}

type runnerModel struct {
	Listen     types.String `tfsdk:"listen"`
	Deployment types.String `tfsdk:"deployment"`
	Image      types.String `tfsdk:"image"`
}

var (
	llmAttrTypes = map[string]attr.Type{
		"provider": types.StringType, "model": types.StringType, "base_url": types.StringType,
		"api_key": types.StringType, "max_steps": types.Int64Type,
		"max_tokens_per_call": types.Int64Type, "message_token_budget": types.Int64Type,
		"agent_token_budget": types.Int64Type, "agent_budget_window_seconds": types.Int64Type,
	}
	containerModeAttrTypes = map[string]attr.Type{
		"enabled": types.BoolType, "image": types.StringType, "memory_limit": types.StringType,
		"timeout_seconds": types.Int64Type, "network": types.StringType, "pids_limit": types.Int64Type,
		"user": types.StringType, "runtime": types.StringType, "prestart": types.BoolType,
	}
	fileAccessAttrTypes = map[string]attr.Type{
		"unrestricted": types.BoolType, "allow_read": types.ListType{ElemType: types.StringType},
		"allow_read_write": types.ListType{ElemType: types.StringType}, "deny": types.ListType{ElemType: types.StringType},
		"allow_home_dotfiles": types.BoolType, "allow_network": types.BoolType,
	}
	threegateAttrTypes = map[string]attr.Type{"network": types.StringType, "role": types.StringType, "ask": types.ListType{ElemType: types.StringType}}
	runnerAttrTypes    = map[string]attr.Type{"listen": types.StringType, "deployment": types.StringType, "image": types.StringType}
)

func emptyStringList() types.List { return types.ListValueMust(types.StringType, []attr.Value{}) }

// defaultContainerMode is the spec's container_mode with its defaults.
func defaultContainerMode() types.Object {
	return types.ObjectValueMust(containerModeAttrTypes, map[string]attr.Value{
		"enabled": types.BoolValue(false), "image": types.StringValue(""),
		"memory_limit": types.StringValue(agentspec.DefaultMemoryLimit), "timeout_seconds": types.Int64Value(agentspec.DefaultTimeoutSeconds),
		"network": types.StringValue(agentspec.DefaultNetwork), "pids_limit": types.Int64Value(agentspec.DefaultPidsLimit),
		"user": types.StringValue(""), "runtime": types.StringValue(agentspec.DefaultRuntime), "prestart": types.BoolValue(true),
	})
}

// defaultFileAccess is the spec's file_access with its defaults.
func defaultFileAccess() types.Object {
	return types.ObjectValueMust(fileAccessAttrTypes, map[string]attr.Value{
		"unrestricted": types.BoolValue(false), "allow_read": emptyStringList(), "allow_read_write": emptyStringList(),
		"deny": emptyStringList(), "allow_home_dotfiles": types.BoolValue(false), "allow_network": types.BoolValue(true),
	})
}

func defaultRunner() types.Object {
	return types.ObjectValueMust(runnerAttrTypes, map[string]attr.Value{
		"listen": types.StringNull(), "deployment": types.StringValue(agentspec.DefaultMode), "image": types.StringValue(""),
	})
}

// objectAs decodes an object into a struct; a null or unknown object leaves
// the struct zero and reports false.
func objectAs[T any](ctx context.Context, o types.Object, diags *diag.Diagnostics) (T, bool) {
	var v T
	if o.IsNull() || o.IsUnknown() {
		return v, false
	}
	diags.Append(o.As(ctx, &v, basetypes.ObjectAsOptions{})...)
	return v, !diags.HasError()
}

func stringList(ctx context.Context, l types.List, diags *diag.Diagnostics) []string {
	if l.IsNull() || l.IsUnknown() {
		return nil
	}
	var out []string
	diags.Append(l.ElementsAs(ctx, &out, false)...)
	return out
}

func listOf(ss []string) types.List {
	vals := make([]attr.Value, len(ss))
	for i, s := range ss {
		vals[i] = types.StringValue(s)
	}
	return types.ListValueMust(types.StringType, vals)
}

// agentInput is the model as the runtime takes it: the agent, and the
// attributes whose values are not known yet (by path: "container_mode",
// "llm.max_tokens_per_call"). An unknown value is its zero in Agent, and
// so is a null one (the plan writes the schema's defaults out; in a
// configuration a zero setting is its default to the runtime as well).
type agentInput struct {
	agentspec.Agent
	unknown map[string]bool
	// onTopology: the model has a threegate block, known or not.
	onTopology bool
}

// known says whether every input of the agent is known, so that the agent
// may be applied, hashed or judged whole; except lists inputs a caller
// does without (the plan's checks need no secret values).
func (in agentInput) known(except ...string) bool {
	for p := range in.unknown {
		if !slices.Contains(except, p) {
			return false
		}
	}
	return true
}

// secretValues stands in agentInput.unknown for a value of secrets that
// is not known yet (its name is).
const secretValues = "secrets[*]"

// agentOf turns the model (configuration, plan or state) into the agent
// the backend takes: the one mapping that validation, plan and apply
// share. The API key is passed in: it lives only in the configuration
// (write-only). soul, memory, manage_soul, force_destroy_workspace and
// runner.listen are taken as they are even while unknown: no check reads
// them, and an unknown listen is planned as the default address
// (planDerived).
func agentOf(ctx context.Context, m agentModel, apiKey string, diags *diag.Diagnostics) agentInput {
	in := agentInput{unknown: map[string]bool{}}
	block := func(o types.Object, name string, target any) {
		switch {
		case o.IsUnknown():
			in.unknown[name] = true
		case !o.IsNull():
			diags.Append(o.As(ctx, target, objectAsOpts)...)
		}
	}
	var llm llmModel
	var cm containerModeModel
	var fa fileAccessModel
	var rn runnerModel
	var tg threegateModel
	block(m.LLM, "llm", &llm)
	block(m.ContainerMode, "container_mode", &cm)
	// A container-mode agent's null file_access is the defaults in the
	// runner's config, as it always was: the config and its hash stay.
	block(orDefaultFileAccess(m.FileAccess), "file_access", &fa)
	block(m.Runner, "runner", &rn)
	block(m.Threegate, "threegate", &tg)
	if diags.HasError() {
		return in
	}
	str := func(v types.String, p string) string {
		if v.IsUnknown() {
			in.unknown[p] = true
		}
		return v.ValueString()
	}
	boolean := func(v types.Bool, p string) bool {
		if v.IsUnknown() {
			in.unknown[p] = true
		}
		return v.ValueBool()
	}
	integer := func(v types.Int64, p string) int64 {
		if v.IsUnknown() {
			in.unknown[p] = true
		}
		return v.ValueInt64()
	}
	list := func(l types.List, p string) []string {
		if l.IsUnknown() || containsUnknown(l) {
			in.unknown[p] = true
			return nil
		}
		return stringList(ctx, l, diags)
	}

	// The typed settings: marked when unknown, parsed once when known.
	str(cm.MemoryLimit, "container_mode.memory_limit")
	str(cm.User, "container_mode.user")
	mem, user := containerValues(cm, diags)
	c := agentspec.Config{
		AgentID: str(m.AgentID, "agent_id"),
		Listen:  rn.Listen.ValueString(),
		Token:   m.Token.ValueString(),
		Container: agentspec.ContainerMode{
			Enabled: boolean(cm.Enabled, "container_mode.enabled"), Image: str(cm.Image, "container_mode.image"),
			MemoryLimit: mem, TimeoutSeconds: int(integer(cm.TimeoutSeconds, "container_mode.timeout_seconds")),
			Network: str(cm.Network, "container_mode.network"), PidsLimit: integer(cm.PidsLimit, "container_mode.pids_limit"),
			User: user, Runtime: str(cm.Runtime, "container_mode.runtime"), Prestart: boolean(cm.Prestart, "container_mode.prestart"),
		},
		LLM: agentspec.LLMConfig{
			Provider: str(llm.Provider, "llm.provider"), Model: str(llm.Model, "llm.model"), BaseURL: str(llm.BaseURL, "llm.base_url"), APIKey: apiKey,
		},
		InjectCredentialsEnv: boolean(m.InjectCredentialsEnv, "inject_credentials_env"),
		InjectSecretsEnv:     boolean(m.InjectSecretsEnv, "inject_secrets_env") || m.InjectSecretsEnv.IsNull() && agentspec.DefaultInjectSecretsEnv,
		RedactSecrets:        boolean(m.RedactSecrets, "redact_secrets"),
		MaxSteps:             int(integer(llm.MaxSteps, "llm.max_steps")),
		LLMLimits: agentspec.LLMLimits{
			MaxTokensPerCall:         integer(llm.MaxTokensPerCall, "llm.max_tokens_per_call"),
			MessageTokenBudget:       integer(llm.MessageTokenBudget, "llm.message_token_budget"),
			AgentTokenBudget:         integer(llm.AgentTokenBudget, "llm.agent_token_budget"),
			AgentBudgetWindowSeconds: integer(llm.AgentBudgetWindowSeconds, "llm.agent_budget_window_seconds"),
		},
	}
	fileAccess := landlock.FileAccess{
		Unrestricted: boolean(fa.Unrestricted, "file_access.unrestricted"), AllowRead: list(fa.AllowRead, "file_access.allow_read"),
		AllowReadWrite: list(fa.AllowReadWrite, "file_access.allow_read_write"), Deny: list(fa.Deny, "file_access.deny"),
		AllowHomeDotfiles: boolean(fa.AllowHomeDotfiles, "file_access.allow_home_dotfiles"), AllowNetwork: boolean(fa.AllowNetwork, "file_access.allow_network"),
	}
	if in.unknown["file_access.allow_read"] || in.unknown["file_access.allow_read_write"] || in.unknown["file_access.deny"] {
		// The lists are judged together (a deny inside an allow): one
		// not known leaves the block unjudged.
		in.unknown["file_access"] = true
	} else {
		c.FileAccess = fileAccess
	}
	switch {
	case m.Secrets.IsUnknown():
		in.unknown["secrets"] = true
	case !m.Secrets.IsNull():
		c.Secrets = map[string]string{}
		for k, v := range m.Secrets.Elements() {
			// A name is known with its map; its value may not be yet,
			// which no check but the hash minds.
			s, _ := v.(types.String)
			c.Secrets[k] = str(s, secretValues)
		}
	}
	c.SecretBindings = secretBindingsOf(ctx, m.SecretBindings, in.unknown, diags)
	c.EgressUpstreamCA = str(m.EgressUpstreamCA, "egress_upstream_ca")
	a := agentspec.Agent{Config: c}
	in.onTopology = !m.Threegate.IsNull()
	if in.onTopology {
		// With threegate the role's networks replace container_mode.network
		// (a conflict is its own error), and the hash keys on the topology
		// and role, resolved at apply.
		a.Config.Container.Network = ""
		a.Meta.ThreegateNetwork, a.Meta.ThreegateRole = str(tg.Network, "threegate.network"), str(tg.Role, "threegate.role")
		a.Meta.ThreegateAsk = list(tg.Ask, "threegate.ask")
	}
	a.Config.Egress = egressOf(ctx, m.Egress, in.unknown, diags)
	a.Meta.Soul, a.Meta.Memory = m.Soul.ValueString(), m.Memory.ValueString()
	a.Meta.ManageSoul, a.Meta.ForceDestroyWorkspace = m.ManageSoul.ValueBool(), m.ForceDestroyWorkspace.ValueBool()
	a.Meta.Deployment, a.Meta.RunnerImage = str(rn.Deployment, "runner.deployment"), str(rn.Image, "runner.image")
	in.Agent = a
	return in
}

// modelOf fills the model from an agent read back from disk (for import):
// everything but the write-only API key and secrets, which state never holds.
func modelOf(m *agentModel, a agentspec.Agent) {
	c, meta := a.Config, a.Meta
	limits := c.LLMLimits.Effective()
	m.ID, m.AgentID = types.StringValue(c.AgentID), types.StringValue(c.AgentID)
	m.LLM = types.ObjectValueMust(llmAttrTypes, map[string]attr.Value{
		"provider": types.StringValue(c.LLM.Provider), "model": types.StringValue(c.LLM.Model),
		"base_url": types.StringValue(c.LLM.BaseURL), "api_key": types.StringNull(),
		"max_steps":                   types.Int64Value(int64(orDefault(c.MaxSteps, agentspec.DefaultMaxSteps))),
		"max_tokens_per_call":         types.Int64Value(limits.MaxTokensPerCall),
		"message_token_budget":        types.Int64Value(limits.MessageTokenBudget),
		"agent_token_budget":          types.Int64Value(limits.AgentTokenBudget),
		"agent_budget_window_seconds": types.Int64Value(limits.AgentBudgetWindowSeconds),
	})
	// Write-only, as the API key: state never holds the secrets.
	m.Secrets = types.MapNull(types.StringType)
	m.SecretBindings = secretBindingsValue(c.SecretBindings)
	m.EgressUpstreamCA = types.StringNull()
	if c.EgressUpstreamCA != "" {
		m.EgressUpstreamCA = types.StringValue(c.EgressUpstreamCA)
	}
	m.InjectCredentialsEnv, m.InjectSecretsEnv = types.BoolValue(c.InjectCredentialsEnv), types.BoolValue(c.InjectSecretsEnv)
	m.RedactSecrets = types.BoolValue(c.RedactSecrets)
	network := types.StringValue(c.Container.Network)
	m.Threegate = types.ObjectNull(threegateAttrTypes)
	m.Egress = egressValue(c.Egress)
	if meta.ThreegateNetwork != "" {
		network = types.StringNull()
		m.Threegate = types.ObjectValueMust(threegateAttrTypes, map[string]attr.Value{
			"network": types.StringValue(meta.ThreegateNetwork), "role": types.StringValue(meta.ThreegateRole),
			"ask": listOrNull(context.Background(), meta.ThreegateAsk),
		})
	}
	m.ContainerMode = types.ObjectValueMust(containerModeAttrTypes, map[string]attr.Value{
		"enabled": types.BoolValue(c.Container.Enabled), "image": types.StringValue(c.Container.Image),
		"memory_limit": types.StringValue(c.Container.MemoryLimit.String()), "timeout_seconds": types.Int64Value(int64(c.Container.TimeoutSeconds)),
		"network": network, "pids_limit": types.Int64Value(c.Container.PidsLimit),
		"user": types.StringValue(c.Container.User.String()), "runtime": types.StringValue(c.Container.Runtime),
		"prestart": types.BoolValue(c.Container.Prestart),
	})
	m.FileAccess = types.ObjectValueMust(fileAccessAttrTypes, map[string]attr.Value{
		"unrestricted": types.BoolValue(c.FileAccess.Unrestricted), "allow_read": listOf(c.FileAccess.AllowRead),
		"allow_read_write": listOf(c.FileAccess.AllowReadWrite), "deny": listOf(c.FileAccess.Deny),
		"allow_home_dotfiles": types.BoolValue(c.FileAccess.AllowHomeDotfiles), "allow_network": types.BoolValue(c.FileAccess.AllowNetwork),
	})
	if c.Container.Enabled && m.FileAccess.Equal(defaultFileAccess()) {
		m.FileAccess = types.ObjectNull(fileAccessAttrTypes)
	}
	m.Runner = types.ObjectValueMust(runnerAttrTypes, map[string]attr.Value{
		"listen": types.StringValue(c.Listen), "deployment": types.StringValue(meta.Deployment),
		"image": types.StringValue(meta.RunnerImage),
	})
	m.Soul, m.Memory = types.StringValue(meta.Soul), types.StringValue(meta.Memory)
	m.ManageSoul, m.ForceDestroyWorkspace = types.BoolValue(meta.ManageSoul), types.BoolValue(meta.ForceDestroyWorkspace)
	m.Token = types.StringValue(c.Token)
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}
