package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
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

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// agentSchema is meepa_agent's schema. Defaults and bounds come from the
// runtime's constants, and the settings the runner checks at start are
// checked at plan by the same function (ValidateConfig), so neither the
// docs nor the plan can drift from the runner.
func agentSchema() schema.Schema {
	return schema.Schema{
		// Version 1: file_access is null for a container-mode agent that
		// does not set it (upgradeAgentStateV0).
		Version: 1,
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
						MarkdownDescription: "One of " + codeList(agentspec.Providers) + ". `openai` is any OpenAI-compatible " +
							"chat-completions endpoint (OpenAI, Ollama, vLLM, LiteLLM, a gateway on ThreeGate's llmnet); " +
							"`offline` is the embedded deterministic responder (not a model): `!sh <cmd>` runs a shell command, " +
							"anything else gets a fixed answer.",
						Validators: []validator.String{stringvalidator.OneOf(agentspec.Providers...)},
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
						Optional: true, Computed: true, Default: int64default.StaticInt64(agentspec.DefaultMaxSteps),
						MarkdownDescription: fmt.Sprintf("Bound on LLM/tool steps per message, 1 to %d. Default `%d`.", agentspec.MaxMaxSteps, agentspec.DefaultMaxSteps),
						Validators:          []validator.Int64{notZero(1, agentspec.MaxMaxSteps)},
					},
					// The relay's spending limits: checked at plan by the
					// runner's own check (agentspec.ValidateSettings).
					"max_tokens_per_call": schema.Int64Attribute{
						Optional: true, Computed: true, Default: int64default.StaticInt64(agentspec.DefaultMaxTokensPerCall),
						MarkdownDescription: fmt.Sprintf("The most one model call through the relay may ask for in `max_tokens`, `max_completion_tokens` or "+
							"`max_output_tokens`, 1 to %d; a call that names none of them, or more than this, is refused (the agent loop asks for "+
							"%d, or this if lower). Default `%d`.", agentspec.MaxMaxTokensPerCall, agentspec.DefaultLoopMaxTokens, agentspec.DefaultMaxTokensPerCall),
						Validators: []validator.Int64{notZero(1, agentspec.MaxMaxTokensPerCall)},
					},
					"message_token_budget": schema.Int64Attribute{
						Optional: true, Computed: true, Default: int64default.StaticInt64(agentspec.DefaultMessageTokenBudget),
						MarkdownDescription: fmt.Sprintf("Tokens (input plus output, as the endpoint reports them) one message may use through the relay: "+
							"the call that crosses it is answered, every later call of the message is refused. At least `max_tokens_per_call`, "+
							"at most %d. Default `%d`.", agentspec.MaxMessageTokenBudget, agentspec.DefaultMessageTokenBudget),
						Validators: []validator.Int64{notZero(1, agentspec.MaxMessageTokenBudget)},
					},
					"agent_token_budget": schema.Int64Attribute{
						Optional: true, Computed: true, Default: int64default.StaticInt64(agentspec.DefaultAgentTokenBudget),
						MarkdownDescription: fmt.Sprintf("Tokens all of the agent's messages may use through the relay in one window of "+
							"`agent_budget_window_seconds`: past it every call is refused until the window ends. The count is kept in the "+
							"runner's journal directory, so a restarted runner goes on with the same window (a runner without a journal, as on "+
							"Kubernetes, starts a new window when it starts). At least `message_token_budget`, at most %d. Default `%d`.",
							agentspec.MaxAgentTokenBudget, agentspec.DefaultAgentTokenBudget),
						Validators: []validator.Int64{notZero(1, agentspec.MaxAgentTokenBudget)},
					},
					"agent_budget_window_seconds": schema.Int64Attribute{
						Optional: true, Computed: true, Default: int64default.StaticInt64(agentspec.DefaultAgentBudgetWindowSeconds),
						MarkdownDescription: fmt.Sprintf("Length of the `agent_token_budget` window, %d to %d seconds. The window is fixed: it starts "+
							"with the first call after the previous window ended. Default `%d` (a day).",
							agentspec.MinAgentBudgetWindowSeconds, agentspec.MaxAgentBudgetWindowSeconds, agentspec.DefaultAgentBudgetWindowSeconds),
						Validators: []validator.Int64{notZero(agentspec.MinAgentBudgetWindowSeconds, agentspec.MaxAgentBudgetWindowSeconds)},
					},
				},
			},

			// Optional.
			"soul": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(""),
				MarkdownDescription: "Initial `SOUL.md` (the agent's system prompt). Written when the workspace is made and never " +
					"over the agent's own edits, unless `manage_soul`: without it, a changed `soul` is kept only as the seed of a " +
					"workspace made again, and the plan warns that `SOUL.md` keeps its text.",
			},
			"memory": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(""),
				MarkdownDescription: "Initial `MEMORY.md`. Written when the workspace is made; afterwards it belongs to the agent " +
					"(a changed `memory` only seeds a workspace made again, and the plan warns).",
			},
			"manage_soul": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				MarkdownDescription: "Keep `SOUL.md` equal to `soul`: the agent's edits show as drift and the next apply overwrites them. Default `false`.",
			},
			"secrets": schema.MapAttribute{
				Optional: true, Sensitive: true, WriteOnly: true, ElementType: types.StringType,
				MarkdownDescription: "Secret values for the agent's tools (e.g. an API token), by name (write-only, as `llm.api_key`: " +
					"never in plan or state; a change changes `config_hash`, which replaces the runner). No value enters a sandbox: " +
					"a secret named in `secret_bindings` reaches the tools as a placeholder in the variable of its name (so the name " +
					"must be an environment variable name, `" + agentspec.EnvNamePattern.String() + "`, and not `HOME`, `TMPDIR`, `PATH` " +
					"or a dynamic loader variable), and the egress proxy puts the value in only on the way to the bound hosts; a secret " +
					"no binding names reaches no tool. Replaced by `[REDACTED]` in replies with `redact_secrets`.",
			},
			"secret_bindings": secretBindingsSchema(),
			"egress_upstream_ca": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "PEM certificates of extra CAs that a host-mode agent's bound hosts may chain to, beside the " +
					"system's roots: the runner's own broker verifies a bound host's TLS with them before it sends the secret. Only " +
					"with `secret_bindings` in host mode; a fetch agent's bound hosts are verified with its topology's " +
					"`proxy.upstream_ca`. Certificates only: a key is refused.",
				Validators: []validator.String{scoped(notEmpty())},
			},
			"inject_credentials_env": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				MarkdownDescription: "Export the LLM credentials to the agent's tool processes (the spec's `image_config` flag, per agent). Default `true`.",
			},
			"inject_secrets_env": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(agentspec.DefaultInjectSecretsEnv),
				DeprecationMessage: "Secrets no longer enter a sandbox: bind each to its hosts with secret_bindings and remove inject_secrets_env.",
				MarkdownDescription: "Deprecated: only `false` is accepted. It exported `secrets` to the tools' environment, where a " +
					"hostile tool could send them anywhere in any spelling; `secret_bindings` replaces it (see the isolation-models " +
					"guide, \"Brokered secrets\").",
			},
			"redact_secrets": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				MarkdownDescription: "Replace every known secret value by `[REDACTED]` in replies and logs. Default `true`.",
			},
			"container_mode": schema.SingleNestedAttribute{
				Optional: true, Computed: true, Default: objectdefault.StaticValue(defaultContainerMode()),
				MarkdownDescription: "Run each message's whole agent loop in a fresh hardened container (read-only rootfs, all " +
					"capabilities dropped, no-new-privileges, memory and pids limits, " + agentspec.TmpSize + " tmpfs `/tmp`, only the workspace " +
					"mounted at `/workspace`). The spec's fields and defaults, plus `pids_limit`, `user`, `runtime` and `prestart`.",
				Attributes: map[string]schema.Attribute{
					"enabled": schema.BoolAttribute{
						Optional: true, Computed: true, Default: booldefault.StaticBool(false),
						MarkdownDescription: "Run the agent loop in a per-message container (`true`) or on the host under Landlock (`false`, then `file_access` applies). " +
							"Must be stated whenever `container_mode` is set: Terraform drops a misspelled key of this object silently, so a plan that would fall back to host mode is refused instead. Without `container_mode` at all the agent runs in host mode.",
					},
					"image": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(""),
						MarkdownDescription: "Image of the per-message containers, and of the runner unless `runner.image` is set. " +
							"Use an isolation image: `meepa_isolation_image.<name>.isolated_image`. Required when `enabled` or " +
							"when the provider runs the runner (`runner.deployment = \"container\"`) and `runner.image` is empty. " +
							"A new image replaces a runner that runs from it (`runner.image` empty); with `runner.image` set, a container-mode " +
							"runner is kept: it reloads its config and the next message runs in the new image.",
						Validators: []validator.String{scoped(optionalImageReference())},
					},
					"memory_limit": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(agentspec.DefaultMemoryLimit),
						MarkdownDescription: "Memory cap per message (swap equal to it; exceeding it is reported as OOM): " +
							"a positive size with an optional unit b, k, m or g, either case (e.g. `512m`, `1g`, `1G`), at least `" + agentspec.MinMemoryLimitText + "`, and at least `" +
							agentspec.MinHostMemoryText + "` in host mode (the limit also bounds the runner's agent child). Default `" + agentspec.DefaultMemoryLimit + "`.",
						Validators: []validator.String{scoped(notEmpty())},
					},
					"timeout_seconds": schema.Int64Attribute{
						Optional: true, Computed: true, Default: int64default.StaticInt64(agentspec.DefaultTimeoutSeconds),
						MarkdownDescription: fmt.Sprintf("Seconds before a message's container is killed, 1 to %d. Default `%d`.", agentspec.MaxTimeoutSeconds, agentspec.DefaultTimeoutSeconds),
						Validators:          []validator.Int64{notZero(1, agentspec.MaxTimeoutSeconds)},
					},
					"network": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(agentspec.DefaultNetwork),
						MarkdownDescription: "Network of the per-message containers: " + codeList(agentspec.Networks) + ". `bridge` " +
							"allows outbound connections (an LLM API) through the provider-managed network `meepa-bridge`, with no route " +
							"to the host, other containers, private or link-local addresses (cloud metadata); `none` has no network. `host` is refused (it would defeat the " +
							"isolation). Null when `threegate` is set (the role's networks are used). Default `" + agentspec.DefaultNetwork + "`.",
						Validators: []validator.String{scoped(notEmpty())},
					},
					"pids_limit": schema.Int64Attribute{
						Optional: true, Computed: true, Default: int64default.StaticInt64(agentspec.DefaultPidsLimit),
						MarkdownDescription: fmt.Sprintf("Process limit per message container (stops fork bombs), %d to %d. Default `%d`.", agentspec.MinPidsLimit, agentspec.MaxPidsLimit, agentspec.DefaultPidsLimit),
						Validators:          []validator.Int64{notZero(agentspec.MinPidsLimit, agentspec.MaxPidsLimit)},
					},
					"user": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(""),
						MarkdownDescription: "Numeric `uid` or `uid:gid` the agent loop runs as; the workspace is owned by it. Empty (the default): " +
							"on a Docker host the agent's own uid, derived from `agent_id` in a range far above the host's ids (uid and gid " +
							"the same number), refused at apply if the host's passwd or group names it or another agent's workspace in " +
							"`state_dir` has it; on a cluster `" + agentspec.DefaultUser + "`. Root (0) and nobody (65534, which every " +
							"unprivileged daemon of a host shares) are refused. Any other uid is taken as given: one the host uses gives " +
							"that user the agent's files.",
					},
					"runtime": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(agentspec.DefaultRuntime),
						MarkdownDescription: "OCI runtime: " + codeList(agentspec.Runtimes) + "; `crun` and `runsc` (gVisor) only when the " +
							"daemon has them, or on a cluster a RuntimeClass of that name or handler (checked at plan and at apply). " +
							"`runsc` puts each message's container on gVisor's kernel; see the gVisor guide for what differs. Default `" + agentspec.DefaultRuntime + "`.",
						Validators: []validator.String{scoped(notEmpty())},
					},
					"prestart": schema.BoolAttribute{
						Optional: true, Computed: true, Default: booldefault.StaticBool(true),
						MarkdownDescription: "Keep the next container started, with its agent loop initialised (workspace and " +
							"`memory.db` open) and waiting on stdin, so a message waits for neither. Every message still gets a " +
							"container that has never seen another, its own relay token on stdin, and reaches it only after the " +
							"previous message's container has exited. Default `true`.",
					},
				},
			},
			// No schema default: the defaults are host mode's, and a
			// container-mode agent would show them in every plan though they
			// govern nothing there. ModifyPlan fills them in host mode.
			"file_access": schema.SingleNestedAttribute{
				Optional: true, Computed: true,
				MarkdownDescription: "Host-mode file access (container mode off), enforced with Landlock on each message's agent " +
					"process: `deny` beats `allow_read_write` beats `allow_read`; writes are denied unless allowed. The spec's fields and defaults. " +
					"Unset, a host-mode agent gets those defaults and a container-mode agent has none (null: it does not apply there).",
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
						MarkdownDescription: "Allow outbound network access (TCP, enforced with Landlock ABI 4+). Default `true`. " +
							"With it, a runner in a container joins the managed `meepa-bridge` network, which reaches the internet " +
							"only (no private, link-local or host addresses), as `container_mode.network = \"bridge\"` does.",
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
						MarkdownDescription: "One of " + codeList(agentspec.Roles) + ".",
						Validators:          []validator.String{stringvalidator.OneOf(agentspec.Roles...)},
					},
					"ask": schema.ListAttribute{
						Optional:    true,
						ElementType: types.StringType,
						MarkdownDescription: "For a `core` agent: the `agent_id`s of the `fetch` and `tool_exec` agents of the same topology it may " +
							"ask (its `ask` tool), e.g. `[meepa_agent.fetch.agent_id]`. The runner routes each ask to the target's runner socket, " +
							"never over a network path from a sandbox; depth one; the answer comes back as untrusted tool output.",
					},
				},
			},
			"egress": egressSchema(),
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
						Optional: true, Computed: true, Default: stringdefault.StaticString(agentspec.DefaultMode),
						MarkdownDescription: "One of " + codeList(agentspec.Modes) + ". `container`: the provider runs the service as " +
							"the container `meepa-runner-<agent_id>` (restart `unless-stopped`). `external`: the provider writes the " +
							"config and an operator runs `agent-runner serve --config <file>` (e.g. from a systemd unit). Default `" + agentspec.DefaultMode + "`.",
						Validators: []validator.String{stringvalidator.OneOf(agentspec.Modes...)},
					},
					"image": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(""),
						MarkdownDescription: "Image the runner service runs from (it needs `agent-runner` on its PATH). Empty: `container_mode.image`, " +
							"and then a new `container_mode.image` replaces the runner; set, a container-mode runner outlives such a change.",
						Validators: []validator.String{scoped(optionalImageReference())},
					},
				},
			},
			"force_destroy_workspace": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				MarkdownDescription: "Delete the workspace (and everything the agent wrote) on destroy. Default `false`: destroy keeps it.",
			},
			"token_version": schema.Int64Attribute{
				Optional: true,
				MarkdownDescription: "Rotates `token`: change this number and the next apply makes a new token and replaces the runner " +
					"with one that accepts only the new one (the old token stops working once the new runner is up; the plan shows " +
					"`token` as known after apply and says the runner is replaced). Unset and `0` are the same, so adding " +
					"`token_version = 0` rotates nothing. At least 0.",
				Validators: []validator.Int64{int64validator.AtLeast(0)},
			},

			// Computed.
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The agent id.",
			},
			"workspace_path": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The workspace on the host, `<state_dir>/agents/<agent_id>` (mode 0700); on a cluster its claim, `pvc://<namespace>/<claim>`.",
			},
			"endpoint": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "Where to send messages: `unix:///<path>` (e.g. `curl --unix-socket <path> http://localhost/v1/messages`) " +
					"or `http://127.0.0.1:<port>`; on a cluster the runner's Service, `http://meepa-<agent_id>.<namespace>.svc:8080`. `POST /v1/messages` with `Authorization: Bearer <token>` and `{\"text\": \"...\"}`.",
			},
			"token": schema.StringAttribute{
				Computed: true, Sensitive: true,
				MarkdownDescription: "Bearer token for the runner's API: 32 random bytes, hex, made once and stable across updates until `token_version` changes.",
			},
			"runner_container_id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The runner container's id; empty for `external` deployment; on a cluster the runner pod's name.",
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
					"including the write-only API key, and a change replaces the runner (the plan warns, naming the settings). " +
					"`container_mode.image` is left out for a container-mode runner with a `runner.image` of its own, which reloads it instead.",
			},
			"landlock_abi": schema.Int64Attribute{
				Computed:            true,
				MarkdownDescription: "The Landlock ABI the runner detected (its `/healthz`); null when the runner does not report it or runs `external`.",
			},
			"agent_uid": schema.Int64Attribute{
				Computed: true,
				MarkdownDescription: "Host mode: the uid (and gid) the agent's process runs under, as the runner reports it. A runner running as " +
					"root gives each agent a uid of its own, derived from `agent_id`; `allow_read_write` trees must be writable by it " +
					"(chown them to it, or grant its group). Null in container mode (see `container_mode.user`) and for `external` runners.",
			},
		},
	}
}
