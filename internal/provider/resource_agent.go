package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

var (
	_ resource.ResourceWithConfigure      = (*agentResource)(nil)
	_ resource.ResourceWithImportState    = (*agentResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*agentResource)(nil)
	_ resource.ResourceWithUpgradeState   = (*agentResource)(nil)
	_ resource.ResourceWithValidateConfig = (*agentResource)(nil)
)

// NewAgentResource is the meepa_agent resource.
func NewAgentResource() resource.Resource { return &agentResource{} }

// agentResource is Terraform glue for deploy.Service, which runs the
// agent's whole lifecycle: this file maps the model onto the service's
// inputs and its results and errors onto state and diagnostics.
type agentResource struct {
	data *providerData
}

func (r *agentResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_agent"
}

func (r *agentResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = agentSchema()
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
	var rn runnerModel
	if !m.Runner.IsNull() && !m.Runner.IsUnknown() {
		diags.Append(m.Runner.As(ctx, &rn, objectAsOpts)...)
	}
	if diags.HasError() {
		return
	}
	validateThreegateAsk(ctx, m, diags)

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
		deployment = agentspec.DefaultMode
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
	in := agentOf(ctx, m, "", diags)
	if diags.HasError() {
		return
	}
	validateListenReach(in, diags)
	// Everything else the runner checks at start, checked by the same
	// function.
	validateSettings(in, diags)
}

// validateListenReach refuses a TCP runner.listen that apply could not
// serve (deploy.ListenUnreachable, which apply runs too): a runner on its
// ThreeGate topology's internal networks only.
func validateListenReach(in agentInput, diags *diag.Diagnostics) {
	for _, p := range []string{"threegate", "runner", "runner.deployment", "container_mode", "container_mode.enabled", "llm", "llm.provider"} {
		if in.unknown[p] {
			return
		}
	}
	if !in.onTopology {
		return
	}
	l, err := deploy.ParseListen(in.Config.Listen)
	if in.Config.Listen == "" || err != nil {
		return // unset, unknown, or the attribute's own validator says why
	}
	if err := deploy.ListenUnreachable(in.Config, in.Deployment(), true, l); err != nil {
		diags.AddAttributeError(path.Root("runner").AtName("listen"), "Unreachable Listen Address", err.Error()+".")
	}
}

// ModifyPlan fills the computed values that are known before apply and
// decides whether the runner must be replaced: when config_hash changes
// (including through the write-only API key, which only the configuration
// holds) or Read found the runner missing, stopped or stale.
func (r *agentResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan agentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// Before anything that needs the provider's configuration: a plan
	// of an unconfigured provider must not keep a stale file_access.
	plan.FileAccess = plannedFileAccess(ctx, req.Config, plan.FileAccess, plan.ContainerMode, &resp.Diagnostics)
	if r.data == nil {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("file_access"), plan.FileAccess)...)
		return
	}
	var state *agentModel
	if !req.State.Raw.IsNull() {
		state = &agentModel{}
		resp.Diagnostics.Append(req.State.Get(ctx, state)...)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	svc, err := r.service(ctx)
	if err != nil {
		addRuntimeError(&resp.Diagnostics, "Kubernetes Unreachable", "connecting to the cluster", err)
		return
	}
	// The write-only values are only in the configuration.
	apiKey, secrets := writeOnlyValues(ctx, req.Config, &resp.Diagnostics)
	m := plan
	m.Secrets = secrets
	in := agentOf(ctx, m, apiKey.ValueString(), &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	// What the checks below read: they need no secret value (and a plan
	// holds none).
	checkable := in.known("secrets", secretValues)
	// An update whose inputs are all known is hashed with the token state
	// holds; a new agent has none yet.
	token := ""
	// A token_version known only at apply may rotate the token: it is
	// planned unknown, and the runner replaced, either way.
	rotate := state != nil && (plan.TokenVersion.IsUnknown() || tokenRotates(plan, *state))
	if state != nil && !rotate && !apiKey.IsUnknown() && in.known() {
		token = state.Token.ValueString()
	}
	deployment := planDerived(ctx, svc, &plan, in, token)
	if checkable {
		ws, err := svc.Check(in.Agent)
		addErrors(&resp.Diagnostics, err, "Not Supported By The Backend", "", nil)
		addWarnings(&resp.Diagnostics, ws)
		r.planRuntime(ctx, svc, in, &resp.Diagnostics)
		r.planAdmission(ctx, svc, &resp.Diagnostics)
	}
	planThreegateAsk(ctx, svc.CheckAsk, plan, &resp.Diagnostics)
	planRunAsk(ctx, r.data.run, plan, &resp.Diagnostics)
	planEgress(ctx, r, in, &resp.Diagnostics)
	if state != nil {
		warnEgressWidens(ctx, plan, *state, &resp.Diagnostics)
		warnBindingsWiden(ctx, plan, *state, &resp.Diagnostics)
	}
	if state == nil {
		plan.Token = types.StringUnknown()
		plan.ConfigHash = types.StringUnknown()
		if deployment != agentspec.ModeExternal {
			plan.RunnerContainerID = types.StringUnknown()
			plan.LandlockABI = types.Int64Unknown()
			plan.AgentUID = types.Int64Unknown()
		}
		resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
		return
	}

	plan.Token = state.Token
	if rotate {
		plan.Token = types.StringUnknown()
	}
	if resp.Diagnostics.HasError() {
		return
	}
	warnSoulSeedOnly(plan, *state, &resp.Diagnostics)
	if deployment != agentspec.ModeExternal {
		// A workspace made again is a new directory: containers the runner
		// prestarted still hold the old one's bind mount, so it is replaced.
		if plan.ConfigHash.IsUnknown() || !plan.ConfigHash.Equal(state.ConfigHash) || !plan.RunnerStatus.Equal(state.RunnerStatus) ||
			!plan.WorkspacePath.Equal(state.WorkspacePath) {
			plan.RunnerContainerID = types.StringUnknown()
			plan.LandlockABI = types.Int64Unknown()
			plan.AgentUID = types.Int64Unknown()
			warnRunnerReplaced(ctx, svc, in, checkable, plan, *state, &resp.Diagnostics)
		} else {
			plan.RunnerContainerID = state.RunnerContainerID
			plan.LandlockABI = state.LandlockABI
			plan.AgentUID = state.AgentUID
		}
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
}

// tokenRotates says whether token_version moved since the last apply
// (unset counts as 0), which makes a new token.
func tokenRotates(plan, state agentModel) bool {
	return !plan.TokenVersion.IsUnknown() && plan.TokenVersion.ValueInt64() != state.TokenVersion.ValueInt64()
}

// planDerived fills what the backend derives before apply (id, workspace,
// the default listen address, endpoint, runner status, and with the
// agent's token the config hash), from one Plan of the backend, and
// returns the deployment mode, "" while unknown.
func planDerived(ctx context.Context, svc agentspec.Backend, plan *agentModel, in agentInput, token string) string {
	// With threegate the role decides the networks; container_mode.network
	// is null then rather than a "bridge" that would not be used.
	if !plan.Threegate.IsNull() && !plan.ContainerMode.IsUnknown() {
		attrs := plan.ContainerMode.Attributes()
		attrs["network"] = types.StringNull()
		plan.ContainerMode = types.ObjectValueMust(containerModeAttrTypes, attrs)
	}
	plan.ConfigHash = types.StringUnknown()
	if plan.AgentID.IsUnknown() {
		plan.RunnerStatus = types.StringUnknown()
		return ""
	}
	a := in.Agent
	// Plan hashes only an agent that has its token.
	a.Config.Token = token
	p := svc.Plan(ctx, a)
	plan.ID = types.StringValue(a.Config.AgentID)
	plan.WorkspacePath = types.StringValue(p.WorkspacePath)
	if token != "" && p.ConfigHash != "" {
		plan.ConfigHash = types.StringValue(p.ConfigHash)
	}
	deployment := ""
	if !plan.Runner.IsUnknown() {
		attrs := plan.Runner.Attributes()
		if l, _ := attrs["listen"].(types.String); l.IsNull() || l.IsUnknown() {
			attrs["listen"] = types.StringValue(p.Listen)
			plan.Runner = types.ObjectValueMust(runnerAttrTypes, attrs)
		}
		if p.Endpoint != "" {
			plan.Endpoint = types.StringValue(p.Endpoint)
		}
		if dep, ok := attrs["deployment"].(types.String); ok && !dep.IsUnknown() {
			deployment = dep.ValueString()
		}
	}
	switch deployment {
	case agentspec.ModeContainer:
		plan.RunnerStatus = types.StringValue(agentspec.StatusRunning)
	case agentspec.ModeExternal:
		plan.RunnerStatus = types.StringValue(agentspec.StatusExternal)
		plan.RunnerContainerID = types.StringValue("")
		plan.LandlockABI = types.Int64Null()
		plan.AgentUID = types.Int64Null()
	default:
		plan.RunnerStatus = types.StringUnknown()
	}
	return deployment
}

func (r *agentResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan agentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || !requireProviderData(r.data, "meepa_agent", &resp.Diagnostics) {
		return
	}
	plan.Token = types.StringValue("")
	r.apply(ctx, req.Config, &plan, nil, true, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	r.setIdentity(ctx, resp.Identity, plan.AgentID, &resp.Diagnostics)
}

// setIdentity records the agent's id and the backend its runner is on.
func (r *agentResource) setIdentity(ctx context.Context, id *tfsdk.ResourceIdentity, agentID types.String, diags *diag.Diagnostics) {
	setIdentity(ctx, id, agentIdentity{AgentID: agentID, Backend: types.StringValue(topologyBackend(ctx, r.data).Kind())}, diags)
}

func (r *agentResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state agentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !requireProviderData(r.data, "meepa_agent", &resp.Diagnostics) {
		return
	}
	// Set on every path out, a removal too: the framework wants an
	// identity after every Read without an error.
	r.setIdentity(ctx, resp.Identity, state.AgentID, &resp.Diagnostics)
	// The API key is not in state; the one on disk is hashed as it is.
	in := agentOf(ctx, state, "", &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	if !in.known() {
		addUnknownAtApplyError(&resp.Diagnostics, "meepa_agent")
		return
	}
	svc, err := r.service(ctx)
	var o agentspec.Observed
	if err == nil {
		o, err = svc.Read(ctx, in.Agent)
	}
	if err != nil {
		r.addServiceError(&resp.Diagnostics, err)
		return
	}
	addWarnings(&resp.Diagnostics, o.Warnings)
	// A missing workspace is drift: the plan shows its path coming back.
	state.WorkspacePath = types.StringValue(o.WorkspacePath)
	if o.WorkspacePath != "" && state.ManageSoul.ValueBool() && o.Soul != state.Soul.ValueString() {
		// Shown as a change of soul back to the configured text.
		state.Soul = types.StringValue(o.Soul)
	}
	// A deleted or edited config file is drift.
	state.ConfigHash = types.StringValue(o.ConfigHash)
	state.RunnerStatus = types.StringValue(o.RunnerStatus)
	if o.RunnerStatus != agentspec.StatusExternal {
		state.RunnerContainerID = types.StringValue(o.RunnerContainerID)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *agentResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state agentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !requireProviderData(r.data, "meepa_agent", &resp.Diagnostics) {
		return
	}
	plan.Token = state.Token
	if tokenRotates(plan, state) {
		plan.Token = types.StringValue("") // the service makes a new one
	}
	r.apply(ctx, req.Config, &plan, &state, plan.RunnerContainerID.IsUnknown(), &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	r.setIdentity(ctx, resp.Identity, plan.AgentID, &resp.Diagnostics)
}

// apply runs the service's Apply for plan and fills plan's computed values
// from its result.
func (r *agentResource) apply(ctx context.Context, config tfConfigGetter, plan, prior *agentModel, redeploy bool, diags *diag.Diagnostics) {
	// Unknown at plan while container_mode was.
	plan.FileAccess = plannedFileAccess(ctx, config, plan.FileAccess, plan.ContainerMode, diags)
	apiKey, secrets := writeOnlyValues(ctx, config, diags)
	m := *plan
	m.Secrets = secrets
	in := agentOf(ctx, m, apiKey.ValueString(), diags)
	if diags.HasError() {
		return
	}
	if !in.known() {
		addUnknownAtApplyError(diags, "meepa_agent")
		return
	}
	a := in.Agent
	svc, err := r.service(ctx)
	if err != nil {
		r.addServiceError(diags, err)
		return
	}
	out, err := svc.Apply(ctx, a, priorOf(ctx, prior), redeploy)
	addWarnings(diags, out.Warnings)
	if err != nil {
		r.addServiceError(diags, err)
		return
	}
	plan.ID = types.StringValue(a.Config.AgentID)
	plan.Token = types.StringValue(out.Token)
	plan.ConfigHash = types.StringValue(out.ConfigHash)
	plan.WorkspacePath = types.StringValue(out.WorkspacePath)
	plan.Endpoint = types.StringValue(out.Endpoint)
	plan.RunnerStatus = types.StringValue(out.RunnerStatus)
	plan.RunnerContainerID = types.StringValue(out.RunnerContainerID)
	plan.LandlockABI, plan.AgentUID = reportedValues(out.Reported)
	if !plan.Threegate.IsNull() {
		attrs := plan.ContainerMode.Attributes()
		attrs["network"] = types.StringNull()
		plan.ContainerMode = types.ObjectValueMust(containerModeAttrTypes, attrs)
	}
}

// tfConfigGetter is the part of tfsdk.Config that apply reads.
type tfConfigGetter interface {
	GetAttribute(ctx context.Context, p path.Path, target interface{}) diag.Diagnostics
}

// writeOnlyValues reads the write-only attributes, which plan and state
// never hold, from the configuration.
func writeOnlyValues(ctx context.Context, config tfConfigGetter, diags *diag.Diagnostics) (types.String, types.Map) {
	var apiKey types.String
	secrets := types.MapNull(types.StringType)
	diags.Append(config.GetAttribute(ctx, path.Root("llm").AtName("api_key"), &apiKey)...)
	diags.Append(config.GetAttribute(ctx, path.Root("secrets"), &secrets)...)
	return apiKey, secrets
}

func (r *agentResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state agentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !requireProviderData(r.data, "meepa_agent", &resp.Diagnostics) {
		return
	}
	in := agentOf(ctx, state, "", &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	svc, err := r.service(ctx)
	if err == nil {
		err = svc.Remove(ctx, in.Agent)
	}
	if err != nil {
		r.addServiceError(&resp.Diagnostics, err)
	}
}

// ImportState takes an agent id, as an import ID or as the identity's
// agent_id, and restores the resource from what the backend keeps of the
// runner (its config and metadata). The write-only API key is never read
// back.
func (r *agentResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	checkIdentityBackend(ctx, req, topologyBackend(ctx, r.data).Kind(), "an agent", &resp.Diagnostics)
	id := importID(ctx, req, "agent_id", &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	if !workspace.ValidID(id) {
		resp.Diagnostics.AddError("Invalid Import ID", fmt.Sprintf("%q is not an agent id (%s). Import with the agent_id: terraform import meepa_agent.<name> <agent_id>, or an import block with identity = { agent_id = ... }.", id, workspace.IDPattern))
		return
	}
	if !requireProviderData(r.data, "meepa_agent", &resp.Diagnostics) {
		return
	}
	svc, err := r.service(ctx)
	var imp agentspec.Imported
	if err == nil {
		imp, err = svc.Import(ctx, id)
	}
	if err != nil {
		r.addServiceError(&resp.Diagnostics, err)
		return
	}
	m := importedModel(imp)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	r.setIdentity(ctx, resp.Identity, m.AgentID, &resp.Diagnostics)
}

// importedModel is the state an import starts from: what the backend
// holds of the agent; Read fills in the rest.
func importedModel(imp agentspec.Imported) agentModel {
	m := agentModel{
		WorkspacePath:     types.StringValue(imp.Agent.Config.Workspace),
		RunnerContainerID: types.StringValue(""),
		RunnerStatus:      types.StringValue(""),
		ConfigHash:        types.StringValue(""),
	}
	m.LandlockABI, m.AgentUID = reportedValues(imp.Reported)
	if imp.Endpoint != "" {
		m.Endpoint = types.StringValue(imp.Endpoint)
	}
	modelOf(&m, imp.Agent)
	return m
}

// service is the agent backend Configure picked, for one request, logging
// under TF_LOG; an error only when the kubeconfig cannot be read.
func (r *agentResource) service(ctx context.Context) (agentspec.Backend, error) {
	return r.data.agents(ctx)
}
