package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/client"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

var (
	_ resource.ResourceWithConfigure      = (*agentResource)(nil)
	_ resource.ResourceWithImportState    = (*agentResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*agentResource)(nil)
	_ resource.ResourceWithValidateConfig = (*agentResource)(nil)
)

// healthTimeout bounds the wait for a new runner's /healthz.
const healthTimeout = 60 * time.Second

// NewAgentResource is the meepa_agent resource.
func NewAgentResource() resource.Resource { return &agentResource{} }

type agentResource struct {
	data *providerData
}

func (r *agentResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_agent"
}

func (r *agentResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = agentSchema()
}

func agentSchema() schema.Schema {
	return schema.Schema{
		MarkdownDescription: "One agent: its persistent workspace (`<state_dir>/agents/<agent_id>/`), its isolation policy " +
			"(container mode, Landlock file access, or unrestricted), its LLM settings and secrets, and a running " +
			"`agent-runner serve` that answers its messages — one fresh hardened container per message in container mode.\n\n" +
			"The provider must run on the Docker host: the workspace is a host directory that the per-message containers bind-mount.",
		Attributes: map[string]schema.Attribute{
			// Required.
			"agent_id": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "The agent's id: `" + workspace.IDPattern + "` (lower-case letters, digits, `_` and `-`, " +
					"at most 63 characters). It names the workspace directory and the runner container " +
					"(`meepa-runner-<agent_id>`), so it cannot hold `/`, `..` or spaces. Changing it makes a new agent.",
				Validators: []validator.String{stringvalidator.RegexMatches(agentIDRegexp,
					"must be 1-63 characters of a-z, 0-9, _ and -, starting with a letter or digit (it becomes a directory and container name)")},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"llm": schema.SingleNestedAttribute{
				Required:            true,
				MarkdownDescription: "Which model answers and how to reach it.",
				Attributes: map[string]schema.Attribute{
					"provider": schema.StringAttribute{
						Required: true,
						MarkdownDescription: "One of " + codeList(llmProviders) + ". `openai` is any OpenAI-compatible " +
							"chat-completions endpoint (OpenAI, Ollama, vLLM, LiteLLM, a gateway on ThreeGate's llmnet); " +
							"`offline` is the embedded deterministic responder (not a model): `!sh <cmd>` runs a shell command, " +
							"anything else gets a fixed answer.",
						Validators: []validator.String{stringvalidator.OneOf(llmProviders...)},
					},
					"model": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(""),
						MarkdownDescription: "Model name, e.g. `gpt-4o-mini` or `claude-sonnet-4-5`.",
					},
					"base_url": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(""),
						MarkdownDescription: "API base URL: " + baseURL().Description(context.Background()) + "; empty means the vendor's default.",
						Validators:          []validator.String{scoped(baseURL())},
					},
					"api_key": schema.StringAttribute{
						Optional: true, Sensitive: true, WriteOnly: true,
						MarkdownDescription: "API key (write-only: Terraform never stores it in plan or state; needs Terraform 1.11+). " +
							"It reaches the agent loop only on stdin, never an env var (unless `inject_credentials_env`), a file in " +
							"the workspace, or a log. A changed key changes `config_hash`, which replaces the runner.",
					},
					"max_steps": schema.Int64Attribute{
						Optional: true, Computed: true, Default: int64default.StaticInt64(defaultMaxSteps),
						MarkdownDescription: fmt.Sprintf("Bound on LLM/tool steps per message. Default `%d`.", defaultMaxSteps),
						Validators:          []validator.Int64{int64validator.Between(1, 100)},
					},
				},
			},

			// Optional.
			"soul": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(""),
				MarkdownDescription: "Initial `SOUL.md` (the agent's system prompt). Written when the workspace is made and never " +
					"over the agent's own edits, unless `manage_soul`.",
			},
			"memory": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(""),
				MarkdownDescription: "Initial `MEMORY.md`. Written when the workspace is made; afterwards it belongs to the agent.",
			},
			"manage_soul": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				MarkdownDescription: "Keep `SOUL.md` equal to `soul`: the agent's edits show as drift and the next apply overwrites them. Default `false`.",
			},
			"secrets": schema.MapAttribute{
				Optional: true, Sensitive: true, ElementType: types.StringType,
				MarkdownDescription: "Extra secret values for the agent loop (e.g. tool credentials), handed over on stdin. " +
					"Exported to tool processes with `inject_secrets_env` (then each name must be an environment variable name, " +
					"`" + agent.EnvNamePattern.String() + "`, and not `HOME`, `TMPDIR`, `PATH` or a dynamic loader variable), replaced by `[REDACTED]` in replies with `redact_secrets`.",
			},
			"inject_credentials_env": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				MarkdownDescription: "Export the LLM credentials to the agent's tool processes (the spec's `image_config` flag, per agent). Default `true`.",
			},
			"inject_secrets_env": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				MarkdownDescription: "Export `secrets` to the agent's tool processes. Default `true`.",
			},
			"redact_secrets": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				MarkdownDescription: "Replace every known secret value by `[REDACTED]` in replies and logs. Default `true`.",
			},
			"container_mode": schema.SingleNestedAttribute{
				Optional: true, Computed: true, Default: objectdefault.StaticValue(defaultContainerMode()),
				MarkdownDescription: "Run each message's whole agent loop in a fresh hardened container (read-only rootfs, all " +
					"capabilities dropped, no-new-privileges, memory and pids limits, 256 MB tmpfs `/tmp`, only the workspace " +
					"mounted at `/workspace`). The spec's fields and defaults, plus `pids_limit`, `user`, `runtime` and `prestart`.",
				Attributes: map[string]schema.Attribute{
					"enabled": schema.BoolAttribute{
						Optional: true, Computed: true, Default: booldefault.StaticBool(false),
						MarkdownDescription: "Run the agent loop in a per-message container. Default `false` (then `file_access` applies).",
					},
					"image": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(""),
						MarkdownDescription: "Image of the per-message containers, and of the runner unless `runner.image` is set. " +
							"Use an isolation image: `meepa_isolation_image.<name>.isolated_image`. Required when `enabled` or " +
							"when the provider runs the runner (`runner.deployment = \"container\"`) and `runner.image` is empty.",
						Validators: []validator.String{scoped(optionalImageReference())},
					},
					"memory_limit": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(defaultMemoryLimit),
						MarkdownDescription: "Memory cap per message (swap equal to it; exceeding it is reported as OOM): " +
							memoryLimit().Description(context.Background()) + ". Default `" + defaultMemoryLimit + "`.",
						Validators: []validator.String{scoped(memoryLimit())},
					},
					"timeout_seconds": schema.Int64Attribute{
						Optional: true, Computed: true, Default: int64default.StaticInt64(defaultTimeoutSeconds),
						MarkdownDescription: fmt.Sprintf("Seconds before a message's container is killed, 1 to 86400. Default `%d`.", defaultTimeoutSeconds),
						Validators:          []validator.Int64{int64validator.Between(1, 86400)},
					},
					"network": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(defaultNetwork),
						MarkdownDescription: "Network of the per-message containers: " + codeList(containerNetworks) + ". `bridge` " +
							"allows outbound connections (an LLM API), `none` has no network. `host` is refused (it would defeat the " +
							"isolation). Null when `threegate` is set (the role's networks are used). Default `" + defaultNetwork + "`.",
						Validators: []validator.String{scoped(containerNetwork())},
					},
					"pids_limit": schema.Int64Attribute{
						Optional: true, Computed: true, Default: int64default.StaticInt64(defaultPidsLimit),
						MarkdownDescription: fmt.Sprintf("Process limit per message container (stops fork bombs). Default `%d`.", defaultPidsLimit),
						Validators:          []validator.Int64{int64validator.Between(16, 1<<20)},
					},
					"user": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(defaultUser),
						MarkdownDescription: "Numeric `uid:gid` the agent loop runs as; the workspace is owned by it. Default `" + defaultUser + "` (nobody).",
						Validators:          []validator.String{stringvalidator.RegexMatches(userPattern, "must be a numeric uid or uid:gid, e.g. 65534:65534")},
					},
					"runtime": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(defaultRuntime),
						MarkdownDescription: "OCI runtime: " + codeList(containerRuntimes) + "; `crun` and `runsc` (gVisor) only when the " +
							"daemon has them (checked at apply). Default `" + defaultRuntime + "`.",
						Validators: []validator.String{stringvalidator.OneOf(containerRuntimes...)},
					},
					"prestart": schema.BoolAttribute{
						Optional: true, Computed: true, Default: booldefault.StaticBool(true),
						MarkdownDescription: "Keep the next container started and waiting on stdin, so a message does not wait for a " +
							"container start. Every message still gets a container that has never seen another. Default `true`.",
					},
				},
			},
			"file_access": schema.SingleNestedAttribute{
				Optional: true, Computed: true, Default: objectdefault.StaticValue(defaultFileAccess()),
				MarkdownDescription: "Host-mode file access (container mode off), enforced with Landlock on each message's agent " +
					"process: `deny` beats `allow_read_write` beats `allow_read`; writes are denied unless allowed. The spec's fields and defaults.",
				Attributes: map[string]schema.Attribute{
					"unrestricted": schema.BoolAttribute{
						Optional: true, Computed: true, Default: booldefault.StaticBool(false),
						MarkdownDescription: "Turn all file access restrictions off (the `--unrestricted` flag). Default `false`.",
					},
					"allow_read": schema.ListAttribute{
						Optional: true, Computed: true, ElementType: types.StringType, Default: listdefault.StaticValue(emptyStringList()),
						MarkdownDescription: "Absolute paths the agent may read but not write. Mounted read-only into the runner at the same path.",
					},
					"allow_read_write": schema.ListAttribute{
						Optional: true, Computed: true, ElementType: types.StringType, Default: listdefault.StaticValue(emptyStringList()),
						MarkdownDescription: "Absolute paths the agent may read and write.",
					},
					"deny": schema.ListAttribute{
						Optional: true, Computed: true, ElementType: types.StringType, Default: listdefault.StaticValue(emptyStringList()),
						MarkdownDescription: "Absolute paths always denied, whatever else allows them. An error together with `unrestricted`.",
					},
					"allow_home_dotfiles": schema.BoolAttribute{
						Optional: true, Computed: true, Default: booldefault.StaticBool(false),
						MarkdownDescription: "Allow reading dotfiles in the home directory. Default `false`.",
					},
					"allow_network": schema.BoolAttribute{
						Optional: true, Computed: true, Default: booldefault.StaticBool(true),
						MarkdownDescription: "Allow outbound network access (TCP, enforced with Landlock ABI 4+). Default `true`.",
					},
				},
			},
			"threegate": schema.SingleNestedAttribute{
				Optional: true,
				MarkdownDescription: "Place the agent in a ThreeGate topology: its per-message containers join exactly the role's " +
					"networks and get the role's env (FETCH: `http_proxy`/`https_proxy`/`no_proxy`). Excludes `container_mode.network`.",
				Attributes: map[string]schema.Attribute{
					"network": schema.StringAttribute{
						Required:            true,
						MarkdownDescription: "The `threegate_network`'s `id`.",
					},
					"role": schema.StringAttribute{
						Required:            true,
						MarkdownDescription: "One of " + codeList(threegateRoles) + ".",
						Validators:          []validator.String{stringvalidator.OneOf(threegateRoles...)},
					},
				},
			},
			"runner": schema.SingleNestedAttribute{
				Optional: true, Computed: true, Default: objectdefault.StaticValue(defaultRunner()),
				MarkdownDescription: "The agent's `agent-runner serve` service.",
				Attributes: map[string]schema.Attribute{
					"listen": schema.StringAttribute{
						Optional: true, Computed: true,
						MarkdownDescription: "Where the runner listens: " + listenAddress().Description(context.Background()) +
							". Default: the unix socket `<state_dir>/runners/<agent_id>/run/runner.sock`.",
						Validators: []validator.String{scoped(listenAddress())},
					},
					"deployment": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(defaultDeployment),
						MarkdownDescription: "One of " + codeList(deploymentModes) + ". `container`: the provider runs the service as " +
							"the container `meepa-runner-<agent_id>` (restart `unless-stopped`). `external`: the provider writes the " +
							"config and an operator runs `agent-runner serve --config <file>` (e.g. from a systemd unit). Default `" + defaultDeployment + "`.",
						Validators: []validator.String{stringvalidator.OneOf(deploymentModes...)},
					},
					"image": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(""),
						MarkdownDescription: "Image the runner service runs from (it needs `agent-runner` on its PATH). Empty: `container_mode.image`.",
						Validators:          []validator.String{scoped(optionalImageReference())},
					},
				},
			},
			"force_destroy_workspace": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				MarkdownDescription: "Delete the workspace (and everything the agent wrote) on destroy. Default `false`: destroy keeps it.",
			},

			// Computed.
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The agent id.",
			},
			"workspace_path": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The workspace on the host, `<state_dir>/agents/<agent_id>` (mode 0700).",
			},
			"endpoint": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "Where to send messages: `unix:///<path>` (e.g. `curl --unix-socket <path> http://localhost/v1/messages`) " +
					"or `http://127.0.0.1:<port>`. `POST /v1/messages` with `Authorization: Bearer <token>` and `{\"text\": \"...\"}`.",
			},
			"token": schema.StringAttribute{
				Computed: true, Sensitive: true,
				MarkdownDescription: "Bearer token for the runner's API: 32 random bytes, hex, made once and stable across updates.",
			},
			"runner_container_id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The runner container's id; empty for `external` deployment.",
			},
			"runner_status": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "`running`, or `external`. Read reports `missing`, `stopped`, `restarting` or `stale` (running an " +
					"older config) as drift, which the next apply repairs.",
			},
			"config_hash": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "SHA-256 over the runner's non-secret config and deployment, and a keyed hash of its secrets " +
					"(token, API key, `secrets`; the key stays in a 0600 file beside the config). It changes when any of them does, " +
					"including the write-only API key.",
			},
			"landlock_abi": schema.Int64Attribute{
				Computed:            true,
				MarkdownDescription: "The Landlock ABI the runner detected (its `/healthz`); null when the runner does not report it or runs `external`.",
			},
		},
	}
}

func (r *agentResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = configureData(req.ProviderData, &resp.Diagnostics)
}

// ValidateConfig checks what spans attributes. Every error names the
// attribute to change.
func (r *agentResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m agentModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	validateAgentConfig(ctx, m, &resp.Diagnostics)
}

// validateAgentConfig runs the cross-attribute checks. It skips what is
// unknown: Terraform validates again at apply, with those values known.
func validateAgentConfig(ctx context.Context, m agentModel, diags *diag.Diagnostics) {
	var cm containerModeModel
	if !m.ContainerMode.IsNull() && !m.ContainerMode.IsUnknown() {
		diags.Append(m.ContainerMode.As(ctx, &cm, objectAsOpts)...)
	}
	var fa fileAccessModel
	if !m.FileAccess.IsNull() && !m.FileAccess.IsUnknown() {
		diags.Append(m.FileAccess.As(ctx, &fa, objectAsOpts)...)
	}
	var rn runnerModel
	if !m.Runner.IsNull() && !m.Runner.IsUnknown() {
		diags.Append(m.Runner.As(ctx, &rn, objectAsOpts)...)
	}
	if diags.HasError() {
		return
	}

	// An unknown block (e.g. container_mode = some_resource.output) is
	// checked once known; until then its zero model must not be taken for
	// "not set".
	if !m.Threegate.IsNull() && !m.Threegate.IsUnknown() && !cm.Network.IsNull() {
		diags.AddAttributeError(path.Root("container_mode").AtName("network"), "Network With ThreeGate",
			"container_mode.network: container_mode.network and threegate both say which network the agent's containers join. With threegate the "+
				"containers join exactly the role's networks; remove container_mode.network.")
	}

	// The runner needs an image with agent-runner in it unless it runs
	// outside Docker; per-message containers need one in container mode.
	deployment := rn.Deployment.ValueString()
	if rn.Deployment.IsNull() {
		deployment = defaultDeployment
	}
	needImage := cm.Enabled.ValueBool() || (deployment == "container" && !rn.Deployment.IsUnknown())
	if needImage && !m.ContainerMode.IsUnknown() && !m.Runner.IsUnknown() && !cm.Image.IsUnknown() && cm.Image.ValueString() == "" && !rn.Image.IsUnknown() &&
		(rn.Image.ValueString() == "" || cm.Enabled.ValueBool()) {
		what := "the runner service"
		if cm.Enabled.ValueBool() {
			what = "the per-message containers"
		}
		diags.AddAttributeError(path.Root("container_mode").AtName("image"), "Missing Image",
			"container_mode.image: no image for "+what+". Set container_mode.image to an isolation image, e.g. "+
				"meepa_isolation_image.<name>.isolated_image (it holds agent-runner)"+
				", or for a host-mode agent set runner.image, or runner.deployment = \"external\".")
	}
	validateFileAccessPlan(ctx, fa, diags)

	// With inject_secrets_env each secret's name becomes a tool's
	// environment variable; the agent loop refuses any other name, which
	// would fail every message instead of this plan.
	if !m.Secrets.IsNull() && !m.Secrets.IsUnknown() && !m.InjectSecretsEnv.IsUnknown() &&
		(m.InjectSecretsEnv.IsNull() || m.InjectSecretsEnv.ValueBool()) {
		for k := range m.Secrets.Elements() {
			if err := agent.CheckToolEnvName(k); err != nil {
				diags.AddAttributeError(path.Root("secrets").AtMapKey(k), "Invalid Secret Name",
					fmt.Sprintf("secrets[%q]: with inject_secrets_env the name becomes an environment variable of the agent's "+
						"tools, and %v. Rename it (e.g. %q), or set inject_secrets_env = false.",
						k, err, envNameSuggestion(k)))
			}
		}
	}
}

// ModifyPlan fills the computed values that are known before apply and
// decides whether the runner must be replaced: when config_hash changes
// (including through the write-only API key, which only the configuration
// holds) or Read found the runner missing, stopped or stale.
func (r *agentResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.data == nil {
		return
	}
	var plan agentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	var state *agentModel
	if !req.State.Raw.IsNull() {
		state = &agentModel{}
		resp.Diagnostics.Append(req.State.Get(ctx, state)...)
	}
	if resp.Diagnostics.HasError() {
		return
	}

	if !plan.AgentID.IsUnknown() {
		id := plan.AgentID.ValueString()
		plan.ID = types.StringValue(id)
		plan.WorkspacePath = types.StringValue(workspace.Path(r.data.stateDir, id))
	}

	// With threegate the role decides the networks; container_mode.network
	// is null then rather than a "bridge" that would not be used.
	if !plan.Threegate.IsNull() && !plan.ContainerMode.IsUnknown() {
		attrs := plan.ContainerMode.Attributes()
		attrs["network"] = types.StringNull()
		plan.ContainerMode = types.ObjectValueMust(containerModeAttrTypes, attrs)
	}

	listen := ""
	deployment := ""
	if !plan.Runner.IsUnknown() && !plan.AgentID.IsUnknown() {
		attrs := plan.Runner.Attributes()
		l, _ := attrs["listen"].(types.String)
		if l.IsNull() || l.IsUnknown() {
			l = types.StringValue("unix://" + deploy.LayoutFor(r.data.stateDir, plan.AgentID.ValueString()).Socket)
			attrs["listen"] = l
			plan.Runner = types.ObjectValueMust(runnerAttrTypes, attrs)
		}
		listen = l.ValueString()
		if lis, err := deploy.ParseListen(listen); err == nil {
			plan.Endpoint = types.StringValue(lis.Endpoint())
		}
		if dep, ok := attrs["deployment"].(types.String); ok && !dep.IsUnknown() {
			deployment = dep.ValueString()
		}
	}
	switch deployment {
	case "container":
		plan.RunnerStatus = types.StringValue("running")
	case "external":
		plan.RunnerStatus = types.StringValue("external")
		plan.RunnerContainerID = types.StringValue("")
		plan.LandlockABI = types.Int64Null()
	default:
		plan.RunnerStatus = types.StringUnknown()
	}

	if state == nil {
		plan.Token = types.StringUnknown()
		plan.ConfigHash = types.StringUnknown()
		if deployment != "external" {
			plan.RunnerContainerID = types.StringUnknown()
			plan.LandlockABI = types.Int64Unknown()
		}
		resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
		return
	}

	plan.Token = state.Token
	plan.ConfigHash = types.StringUnknown()
	var apiKey types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("llm").AtName("api_key"), &apiKey)...)
	if !apiKey.IsUnknown() && !plan.WorkspacePath.IsUnknown() && listen != "" {
		ri, known := toRuntime(ctx, plan, plan.WorkspacePath.ValueString(), listen, state.Token.ValueString(), apiKey.ValueString(), &resp.Diagnostics)
		key, err := deploy.ReadHashKey(deploy.LayoutFor(r.data.stateDir, plan.AgentID.ValueString()))
		if known && err == nil {
			plan.ConfigHash = types.StringValue(configHash(ri, r.data.version, key))
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	if deployment != "external" {
		// A workspace made again is a new directory: containers the runner
		// prestarted still hold the old one's bind mount, so it is replaced.
		if plan.ConfigHash.IsUnknown() || !plan.ConfigHash.Equal(state.ConfigHash) || !plan.RunnerStatus.Equal(state.RunnerStatus) ||
			!plan.WorkspacePath.Equal(state.WorkspacePath) {
			plan.RunnerContainerID = types.StringUnknown()
			plan.LandlockABI = types.Int64Unknown()
		} else {
			plan.RunnerContainerID = state.RunnerContainerID
			plan.LandlockABI = state.LandlockABI
		}
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
}

// configHash is deploy.ConfigHash over what the plan can know: a threegate
// role's networks and env are resolved at apply, so the hash covers the
// threegate network id and role in their place.
func configHash(ri runtimeInputs, version string, key []byte) string {
	c := ri.Config
	s := deploy.Settings{Mode: ri.Deployment, Image: ri.RunnerImage, Version: version}
	if ri.Threegate != nil {
		c.Container.Network, c.Container.Networks, c.Env = "", nil, nil
		s.ThreegateNetwork, s.ThreegateRole = ri.Threegate.Network.ValueString(), ri.Threegate.Role.ValueString()
	}
	return deploy.ConfigHash(c, s, key)
}

func (r *agentResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan agentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || !requireProviderData(r.data, "meepa_agent", &resp.Diagnostics) {
		return
	}
	token, err := deploy.NewToken()
	if err != nil {
		addRuntimeError(&resp.Diagnostics, "Token Generation Failed", "generating the runner's bearer token", err)
		return
	}
	plan.Token = types.StringValue(token)
	resp.Diagnostics.Append(r.apply(ctx, req.Config, &plan, nil, true)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *agentResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state agentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !requireProviderData(r.data, "meepa_agent", &resp.Diagnostics) {
		return
	}
	id := state.AgentID.ValueString()
	layout := deploy.LayoutFor(r.data.stateDir, id)

	// The workspace: missing is drift (the plan shows its path coming back).
	wsPath := workspace.Path(r.data.stateDir, id)
	ws, err := workspace.Inspect(wsPath)
	if err != nil {
		addRuntimeError(&resp.Diagnostics, "Workspace Read Failed", "reading "+wsPath, err)
		return
	}
	if !ws.Exists {
		state.WorkspacePath = types.StringValue("")
	} else {
		state.WorkspacePath = types.StringValue(wsPath)
		if state.ManageSoul.ValueBool() && ws.Soul != state.Soul.ValueString() {
			// Shown as a change of soul back to the configured text.
			state.Soul = types.StringValue(ws.Soul)
		}
	}

	// The config on disk, hashed as apply would: a deleted or edited file
	// is drift.
	state.ConfigHash = types.StringValue(r.hashOnDisk(ctx, state, layout, &resp.Diagnostics))
	if resp.Diagnostics.HasError() {
		return
	}

	rn, _ := objectAs[runnerModel](ctx, state.Runner, &resp.Diagnostics)
	if rn.Deployment.ValueString() == "external" {
		state.RunnerStatus = types.StringValue("external")
		resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
		return
	}
	cli := r.data.dockerClient(ctx, &resp.Diagnostics)
	if cli == nil {
		return
	}
	st, err := deploy.Inspect(ctx, cli, id)
	if err != nil {
		addRuntimeError(&resp.Diagnostics, "Runner Read Failed", "inspecting "+deploy.ContainerName(id), err)
		return
	}
	status := st.State
	if status == "running" && st.ConfigHash != state.ConfigHash.ValueString() {
		status = "stale"
	}
	// A runner of another build than the provider's is drift too: the plan
	// replaces it (runner_status "stale" -> "running"). See deploy/version.go.
	if status == "running" {
		if drift := deploy.RunnerVersionDrift(ctx, rn.Listen.ValueString()); drift != nil {
			status = "stale"
			resp.Diagnostics.AddWarning("Runner Version Drift", drift.Error())
		}
	}
	state.RunnerStatus = types.StringValue(status)
	state.RunnerContainerID = types.StringValue(st.ID)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// hashOnDisk hashes the runner config file as apply would have; "" when the
// file or the key is gone or unreadable.
func (r *agentResource) hashOnDisk(ctx context.Context, state agentModel, layout deploy.Layout, diags *diag.Diagnostics) string {
	cfg, err := runner.LoadConfig(layout.ConfigFile)
	if err != nil {
		tflog.Debug(ctx, "runner config unreadable", map[string]any{"file": layout.ConfigFile, "error": err.Error()})
		return ""
	}
	key, err := deploy.ReadHashKey(layout)
	if err != nil {
		return ""
	}
	var d diag.Diagnostics
	ri, known := toRuntime(ctx, state, cfg.Workspace, cfg.Listen, cfg.Token, cfg.LLM.APIKey, &d)
	if !known || d.HasError() {
		diags.Append(d...)
		return ""
	}
	if ri.Deployment == "container" && strings.HasPrefix(cfg.Listen, "0.0.0.0:") {
		cfg.Listen = "127.0.0.1:" + strings.TrimPrefix(cfg.Listen, "0.0.0.0:")
	}
	ri.Config = *cfg
	return configHash(ri, r.data.version, key)
}

func (r *agentResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state agentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !requireProviderData(r.data, "meepa_agent", &resp.Diagnostics) {
		return
	}
	plan.Token = state.Token
	resp.Diagnostics.Append(r.apply(ctx, req.Config, &plan, &state, plan.RunnerContainerID.IsUnknown())...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// apply makes the real objects match plan: the workspace, the runner's
// files, and (when redeploy) the runner container. It fills plan's computed
// values.
func (r *agentResource) apply(ctx context.Context, config tfConfigGetter, plan *agentModel, prior *agentModel, redeploy bool) diag.Diagnostics {
	var diags diag.Diagnostics
	id := plan.AgentID.ValueString()
	wsPath := workspace.Path(r.data.stateDir, id)
	layout := deploy.LayoutFor(r.data.stateDir, id)

	var apiKey types.String
	diags.Append(config.GetAttribute(ctx, path.Root("llm").AtName("api_key"), &apiKey)...)
	rn, _ := objectAs[runnerModel](ctx, plan.Runner, &diags)
	listener, err := deploy.ParseListen(rn.Listen.ValueString())
	if err != nil {
		diags.AddAttributeError(path.Root("runner").AtName("listen"), "Invalid Listen Address", err.Error())
		return diags
	}
	ri, known := toRuntime(ctx, *plan, wsPath, listener.String(), plan.Token.ValueString(), apiKey.ValueString(), &diags)
	if diags.HasError() {
		return diags
	}
	if !known {
		addUnknownAtApplyError(&diags, "meepa_agent")
		return diags
	}
	containerDeploy := ri.Deployment == "container"

	var cli client.APIClient
	if containerDeploy || ri.Config.Container.Enabled || ri.Threegate != nil {
		c := r.data.dockerClient(ctx, &diags)
		if c == nil {
			return diags
		}
		cli = c
	}
	if cli != nil && ri.Config.Container.Enabled && ri.Config.Container.Runtime != "" && ri.Config.Container.Runtime != defaultRuntime {
		if err := checkRuntime(ctx, cli, ri.Config.Container.Runtime); err != nil {
			diags.AddAttributeError(path.Root("container_mode").AtName("runtime"), "Runtime Not Available", err.Error())
			return diags
		}
	}
	if ri.Threegate != nil {
		nets, env, err := resolveThreegateRole(ctx, cli, ri.Threegate.Network.ValueString(), ri.Threegate.Role.ValueString())
		if err != nil {
			diags.AddAttributeError(path.Root("threegate"), "ThreeGate Role Not Resolved", err.Error())
			return diags
		}
		ri.Config.Container.Networks = nets
		ri.Config.Env = env
	}

	// The workspace.
	owner, warn := workspaceOwner(ri.Config)
	if warn != "" {
		diags.AddWarning("Workspace Ownership", warn)
	}
	soul, memory := plan.Soul.ValueString(), plan.Memory.ValueString()
	res, err := workspace.Ensure(workspace.Spec{Dir: wsPath, Soul: soul, Memory: memory, ManageSoul: plan.ManageSoul.ValueBool(), Owner: owner})
	if err != nil {
		addRuntimeError(&diags, "Workspace Failed", "making the workspace "+wsPath, err)
		return diags
	}
	if res.Created && prior != nil {
		diags.AddWarning("Workspace Recreated",
			fmt.Sprintf("The workspace %s was missing and has been made again with the initial SOUL.md and MEMORY.md. "+
				"Whatever the agent had written there was lost outside Terraform.", wsPath))
	}
	tflog.Debug(ctx, "workspace ready", map[string]any{"path": wsPath, "created": res.Created, "soul_written": res.SoulWritten})

	// The runner's files, outside the workspace.
	key, err := deploy.Prepare(layout)
	if err != nil {
		addRuntimeError(&diags, "Runner Files Failed", "preparing "+layout.Dir, err)
		return diags
	}
	cfg := ri.Config
	if containerDeploy && listener.Port != 0 {
		// Inside its container the runner must listen on the container's
		// interface for the port published on the host's 127.0.0.1.
		cfg.Listen = "0.0.0.0:" + strconv.Itoa(listener.Port)
	}
	if err := deploy.WriteConfig(layout, &cfg); err != nil {
		addRuntimeError(&diags, "Runner Config Failed", "writing "+layout.ConfigFile, err)
		return diags
	}
	if err := writeMeta(layout, metaOf(*plan, ri)); err != nil {
		addRuntimeError(&diags, "Runner Config Failed", "writing the agent's metadata", err)
		return diags
	}
	hash := configHash(ri, r.data.version, key)
	plan.ConfigHash = types.StringValue(hash)
	plan.ID = types.StringValue(id)
	plan.WorkspacePath = types.StringValue(wsPath)
	plan.Endpoint = types.StringValue(listener.Endpoint())
	if !plan.Threegate.IsNull() {
		attrs := plan.ContainerMode.Attributes()
		attrs["network"] = types.StringNull()
		plan.ContainerMode = types.ObjectValueMust(containerModeAttrTypes, attrs)
	}

	if !containerDeploy {
		// An operator runs the service; a container left from an earlier
		// "container" deployment would be a second runner, so that one
		// case needs the daemon. An agent that was always external, in
		// host mode, needs no daemon at all.
		if cli == nil && prior != nil && wasContainerDeployed(ctx, *prior) {
			c := r.data.dockerClient(ctx, &diags)
			if c == nil {
				return diags
			}
			cli = c
		}
		if cli != nil {
			if err := deploy.Remove(ctx, cli, id, deploy.StopTimeout(ri.Config)); err != nil {
				addRuntimeError(&diags, "Runner Remove Failed", "removing the runner container of "+id, err)
				return diags
			}
		}
		plan.RunnerStatus = types.StringValue("external")
		plan.RunnerContainerID = types.StringValue("")
		plan.LandlockABI = types.Int64Null()
		return diags
	}

	if !redeploy && prior != nil {
		plan.RunnerStatus = prior.RunnerStatus
		plan.RunnerContainerID = prior.RunnerContainerID
		plan.LandlockABI = prior.LandlockABI
		return diags
	}
	dep, err := deploy.ForConfig(ri.Config, deploy.Placement{
		Image: ri.RunnerImage, Layout: layout, Listener: listener, Workspace: wsPath, ConfigHash: hash, DockerSocket: r.dockerSocket(),
	})
	if err != nil {
		addRuntimeError(&diags, "Runner Deploy Failed", "preparing the runner of "+id, err)
		return diags
	}
	tflog.Info(ctx, "deploying runner", map[string]any{"agent_id": id, "image": dep.Image, "container": deploy.ContainerName(id)})
	// A runner that failed is removed: with its restart policy it would
	// crash-loop; and a failed create leaves no state that would ever remove
	// its config, so the secrets in it go too.
	failed := func() {
		if rerr := deploy.Remove(context.WithoutCancel(ctx), cli, id, time.Second); rerr != nil {
			addRuntimeError(&diags, "Runner Remove Failed", "removing the failed "+deploy.ContainerName(id), rerr)
		}
		if prior == nil {
			if rerr := deploy.RemoveFiles(layout); rerr != nil {
				addRuntimeError(&diags, "Runner Files Remove Failed", "removing the runner's files", rerr)
			}
		}
	}
	cid, err := deploy.Deploy(ctx, cli, dep)
	if err != nil {
		addRuntimeError(&diags, "Runner Deploy Failed", "starting "+deploy.ContainerName(id)+" from "+dep.Image, err)
		failed()
		return diags
	}
	health, err := deploy.WaitHealthy(ctx, cli, cid, listener, healthTimeout)
	if err != nil {
		addRuntimeError(&diags, "Runner Unhealthy", deploy.ContainerName(id)+" did not become healthy", err)
		failed()
		return diags
	}
	plan.RunnerContainerID = types.StringValue(cid)
	plan.RunnerStatus = types.StringValue("running")
	if abi := health.Int("landlock_abi"); abi >= 0 {
		plan.LandlockABI = types.Int64Value(abi)
	} else {
		plan.LandlockABI = types.Int64Null()
	}
	return diags
}

// tfConfigGetter is the part of tfsdk.Config that apply reads.
type tfConfigGetter interface {
	GetAttribute(ctx context.Context, p path.Path, target interface{}) diag.Diagnostics
}

func (r *agentResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state agentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !requireProviderData(r.data, "meepa_agent", &resp.Diagnostics) {
		return
	}
	id := state.AgentID.ValueString()
	cm, _ := objectAs[containerModeModel](ctx, state.ContainerMode, &resp.Diagnostics)
	rn, _ := objectAs[runnerModel](ctx, state.Runner, &resp.Diagnostics)
	if rn.Deployment.ValueString() != "external" {
		cli := r.data.dockerClient(ctx, &resp.Diagnostics)
		if cli == nil {
			return
		}
		timeout := deploy.StopTimeout(runner.Config{Container: runner.ContainerMode{TimeoutSeconds: int(cm.TimeoutSeconds.ValueInt64())}})
		if err := deploy.Remove(ctx, cli, id, timeout); err != nil {
			addRuntimeError(&resp.Diagnostics, "Runner Remove Failed", "removing "+deploy.ContainerName(id), err)
			return
		}
	}
	// The config holds the token and the secrets: it goes with the agent.
	if err := deploy.RemoveFiles(deploy.LayoutFor(r.data.stateDir, id)); err != nil {
		addRuntimeError(&resp.Diagnostics, "Runner Files Remove Failed", "removing the runner's files", err)
		return
	}
	wsPath := workspace.Path(r.data.stateDir, id)
	if state.ForceDestroyWorkspace.ValueBool() {
		if err := workspace.Remove(wsPath); err != nil {
			addRuntimeError(&resp.Diagnostics, "Workspace Remove Failed", "removing "+wsPath, err)
		}
		return
	}
	tflog.Info(ctx, "keeping the agent's workspace", map[string]any{"path": wsPath})
}

// ImportState takes an agent id and restores the resource from the runner's
// config and metadata files under the state directory. The write-only API
// key is never read back.
func (r *agentResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if !workspace.ValidID(req.ID) {
		resp.Diagnostics.AddError("Invalid Import ID", fmt.Sprintf("%q is not an agent id (%s). Import with the agent_id: terraform import meepa_agent.<name> <agent_id>.", req.ID, workspace.IDPattern))
		return
	}
	if !requireProviderData(r.data, "meepa_agent", &resp.Diagnostics) {
		return
	}
	layout := deploy.LayoutFor(r.data.stateDir, req.ID)
	cfg, err := runner.LoadConfig(layout.ConfigFile)
	if err != nil {
		resp.Diagnostics.AddError("Agent Not Found",
			fmt.Sprintf("No runner config for agent %q under %s: %v. Import works for agents this provider (with this state_dir) made.", req.ID, r.data.stateDir, err))
		return
	}
	meta, err := readMeta(layout)
	if err != nil {
		resp.Diagnostics.AddError("Agent Not Found", fmt.Sprintf("Agent %q has a runner config but no readable metadata: %v. "+
			"Import reads both files apply writes under %s; restore agent.json from a backup, or check that state_dir is the one the agent was made with.",
			req.ID, err, layout.Dir))
		return
	}
	if strings.HasPrefix(cfg.Listen, "0.0.0.0:") {
		cfg.Listen = "127.0.0.1:" + strings.TrimPrefix(cfg.Listen, "0.0.0.0:")
	}
	m := agentModel{
		WorkspacePath:     types.StringValue(cfg.Workspace),
		RunnerContainerID: types.StringValue(""),
		RunnerStatus:      types.StringValue(""),
		ConfigHash:        types.StringValue(""),
		LandlockABI:       types.Int64Null(),
	}
	fromRuntime(&m, cfg, meta)
	if l, err := deploy.ParseListen(cfg.Listen); err == nil {
		m.Endpoint = types.StringValue(l.Endpoint())
	}
	// Only the live runner knows its Landlock ABI.
	if meta.Deployment == "container" {
		if h, err := deploy.CheckHealth(ctx, mustListener(cfg.Listen)); err == nil {
			if abi := h.Int("landlock_abi"); abi >= 0 {
				m.LandlockABI = types.Int64Value(abi)
			}
		}
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func mustListener(s string) deploy.Listener {
	l, _ := deploy.ParseListen(s)
	return l
}

func metaOf(m agentModel, ri runtimeInputs) agentMeta {
	rn := agentMeta{
		Soul:                  m.Soul.ValueString(),
		Memory:                m.Memory.ValueString(),
		ManageSoul:            m.ManageSoul.ValueBool(),
		ForceDestroyWorkspace: m.ForceDestroyWorkspace.ValueBool(),
		Deployment:            ri.Deployment,
	}
	attrs := m.Runner.Attributes()
	if img, ok := attrs["image"].(types.String); ok {
		rn.RunnerImage = img.ValueString()
	}
	if ri.Threegate != nil {
		rn.ThreegateNetwork = ri.Threegate.Network.ValueString()
		rn.ThreegateRole = ri.Threegate.Role.ValueString()
	}
	return rn
}

func metaFile(l deploy.Layout) string { return filepath.Join(l.Dir, "agent.json") }

func writeMeta(l deploy.Layout, m agentMeta) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := metaFile(l) + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return fmt.Errorf("agent meta: %w", err)
	}
	return os.Rename(tmp, metaFile(l))
}

func readMeta(l deploy.Layout) (agentMeta, error) {
	var m agentMeta
	raw, err := os.ReadFile(metaFile(l))
	if errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("%s is missing", metaFile(l))
	}
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(raw, &m)
}

// wasContainerDeployed tells whether an agent's state says the provider ran
// its runner as a container.
func wasContainerDeployed(ctx context.Context, m agentModel) bool {
	var diags diag.Diagnostics
	rn, ok := objectAs[runnerModel](ctx, m.Runner, &diags)
	return !ok || rn.Deployment.ValueString() == "container"
}

// dockerSocket is the daemon's socket on this host: the provider's own unix
// docker_host, else the default.
func (r *agentResource) dockerSocket() string {
	if h := engine.HostOf(r.data.docker.opts); strings.HasPrefix(h, "unix://") {
		return strings.TrimPrefix(h, "unix://")
	}
	return deploy.DefaultDockerSocket
}

// workspaceOwner says who must own the workspace: the per-message
// container's user in container mode, the runner's (the provider's) user in
// host mode, where the agent runs as the runner's child.
func workspaceOwner(c runner.Config) (*workspace.Owner, string) {
	me := workspace.Owner{UID: os.Getuid(), GID: os.Getgid()}
	if !c.Container.Enabled {
		return &me, ""
	}
	want := parseUser(c.Container.User)
	if me.UID == 0 || want == me {
		return &want, ""
	}
	return nil, fmt.Sprintf("The provider runs as uid %d and cannot hand the workspace to %d:%d (container_mode.user); "+
		"the per-message containers may be unable to write /workspace. Run the provider as root or set "+
		"container_mode.user = \"%d:%d\".", me.UID, want.UID, want.GID, me.UID, me.GID)
}

func parseUser(u string) workspace.Owner {
	if u == "" {
		u = defaultUser
	}
	uid, gid, found := strings.Cut(u, ":")
	o := workspace.Owner{}
	o.UID, _ = strconv.Atoi(uid)
	o.GID = o.UID
	if found {
		o.GID, _ = strconv.Atoi(gid)
	}
	return o
}

func checkRuntime(ctx context.Context, cli client.APIClient, name string) error {
	info, err := cli.Info(ctx)
	if err != nil {
		return fmt.Errorf("docker info: %w", err)
	}
	if _, ok := info.Runtimes[name]; ok {
		return nil
	}
	have := make([]string, 0, len(info.Runtimes))
	for k := range info.Runtimes {
		have = append(have, k)
	}
	return fmt.Errorf("the Docker daemon has no %q runtime (it has: %s); install it and register it in daemon.json, or use runc", name, strings.Join(have, ", "))
}
