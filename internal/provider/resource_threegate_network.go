package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

var (
	_ resource.ResourceWithConfigure      = (*threegateNetworkResource)(nil)
	_ resource.ResourceWithImportState    = (*threegateNetworkResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*threegateNetworkResource)(nil)
	_ resource.ResourceWithValidateConfig = (*threegateNetworkResource)(nil)
)

// NewThreegateNetworkResource is the threegate_network resource.
func NewThreegateNetworkResource() resource.Resource { return &threegateNetworkResource{} }

type threegateNetworkResource struct {
	data *providerData
}

func (r *threegateNetworkResource) Metadata(_ context.Context, _ resource.MetadataRequest, resp *resource.MetadataResponse) {
	// Served by provider meepa under its own prefix, as google-beta serves
	// google_*: configurations say `provider = meepa`.
	resp.TypeName = "threegate_network"
}

func (r *threegateNetworkResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	subnet := func(kind, what string) schema.StringAttribute {
		return schema.StringAttribute{
			Optional: true, Computed: true,
			MarkdownDescription: fmt.Sprintf("IPv4 subnet of `%s` (%s), /8 to /28. Defaults to a /24 in 10.200.0.0–10.239.255.255 "+
				"derived from `name`. Docker hands out addresses only from its upper half; the lower half holds the gateway "+
				"and pinned addresses. Must not overlap the other two, another Docker network or a host route.", kind, what),
		}
	}
	gateway := func(kind string) schema.StringAttribute {
		return schema.StringAttribute{
			Optional: true, Computed: true,
			MarkdownDescription: fmt.Sprintf("Gateway (host bridge address) of `%s`, in the lower half of its subnet. Defaults to the first host address.", kind),
		}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "The ThreeGate topology: `<name>-llmnet` (internal: CORE, FETCH, TOOL-EXEC, the LLM gateway), " +
			"`<name>-fetchnet` (internal: FETCH and the proxy) and `<name>-egressnet` (not internal: the proxy only), the egress " +
			"proxy (`agent-runner proxy`) at pinned addresses, and the host firewall that enforces the topology: chains " +
			"`TG-<name>` (one jump from `DOCKER-USER`) and `TGI-<name>` (one jump from `INPUT`, closing the path to host " +
			"services through the bridge gateways). Served by provider `meepa`: write `provider = meepa`. Needs root on the " +
			"Docker host for iptables. Drift of networks, proxy or rules shows in `drift` and the next apply restores it.",
		Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{
				Required: true,
				MarkdownDescription: fmt.Sprintf("Topology name: 1 to %d lower-case letters, digits or `-`. Prefixes the networks, "+
					"the proxy container (`<name>-proxy`) and the chains. Changing it replaces the topology.", topospec.MaxNameLen),
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"llmnet_subnet":     subnet("llmnet", "internal"),
			"fetchnet_subnet":   subnet("fetchnet", "internal"),
			"egressnet_subnet":  subnet("egressnet", "not internal"),
			"llmnet_gateway":    gateway("llmnet"),
			"fetchnet_gateway":  gateway("fetchnet"),
			"egressnet_gateway": gateway("egressnet"),
			"proxy": schema.SingleNestedAttribute{
				Required:            true,
				MarkdownDescription: "The egress proxy, the only member of `egressnet` and FETCH's only way out.",
				Attributes: map[string]schema.Attribute{
					"image": schema.StringAttribute{
						Required: true,
						MarkdownDescription: "An isolation image containing `/usr/local/bin/agent-runner` (e.g. from `meepa_isolation_image`). " +
							"It must be present on the daemon; nothing is pulled.",
						Validators: []validator.String{scoped(imageReference())},
					},
					"allow": schema.ListAttribute{
						Required: true, ElementType: types.StringType,
						MarkdownDescription: "Allowed destinations, `host:port` patterns: `host`, `host:port`, `*.domain[:port]`, an IPv4 " +
							"literal or `[IPv6]:port`. A bare host means port 443. No schemes, paths or user info. Adding an entry " +
							"widens connectivity and the plan says so.",
					},
					"allow_private": schema.ListAttribute{
						Optional: true, ElementType: types.StringType,
						MarkdownDescription: "CIDRs the proxy may reach although they are loopback, private, link-local or otherwise " +
							"special (by default it refuses them, checking the address it actually connects to).",
					},
					"ip": schema.StringAttribute{
						Optional: true, Computed: true,
						MarkdownDescription: "The proxy's pinned address on `fetchnet`, in the lower half of its subnet. Defaults to the address after the gateway.",
					},
					"egress_ip": schema.StringAttribute{
						Optional: true, Computed: true,
						MarkdownDescription: "The proxy's pinned address on `egressnet`; the only source the firewall lets out (tcp/443, DNS). Defaults to the address after the gateway.",
					},
					"port": schema.Int64Attribute{
						Optional: true, Computed: true,
						MarkdownDescription: fmt.Sprintf("Port the proxy listens on (on its `fetchnet` address only). Defaults to %d.", topospec.DefaultProxyPort),
					},
					"dns": schema.ListAttribute{
						Optional: true, ElementType: types.StringType,
						MarkdownDescription: "IPv4 DNS servers the proxy resolves with. When set, the firewall lets the proxy's DNS go only to them; " +
							"when empty, to any address on port 53, and the proxy uses the container's resolver.",
					},
					"upstream_ca": schema.StringAttribute{
						Optional: true,
						MarkdownDescription: "PEM certificates of extra CAs that a bound host's certificate may chain to, beside the " +
							"system's roots: for a private API whose certificate a public CA did not sign. The proxy verifies a bound " +
							"host's TLS before it sends a brokered secret there (see `meepa_agent.secret_bindings`). Certificates only: " +
							"a key is refused. A change replaces the proxy.",
						Validators: []validator.String{scoped(notEmpty())},
					},
				},
			},
			"firewall": schema.SingleNestedAttribute{
				Optional: true, Computed: true,
				MarkdownDescription: "The host firewall. Defaults to enabled, without logging.",
				Default: objectdefault.StaticValue(types.ObjectValueMust(firewallAttrTypes,
					map[string]attr.Value{"enabled": types.BoolValue(true), "log_denied": types.BoolValue(false)})),
				Attributes: map[string]schema.Attribute{
					"enabled": schema.BoolAttribute{
						Optional: true, Computed: true, Default: booldefault.StaticBool(true),
						MarkdownDescription: "Enforce the topology with iptables. Turning it off widens connectivity; the plan warns.",
					},
					"log_denied": schema.BoolAttribute{
						Optional: true, Computed: true, Default: booldefault.StaticBool(false),
						MarkdownDescription: "Add a `LOG` rule (prefix `tg:<name> fwd`/`host`) before each drop.",
					},
				},
			},

			"id": schema.StringAttribute{
				Computed: true, MarkdownDescription: "The topology name.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"networks": schema.MapAttribute{
				Computed: true, ElementType: networkObjectType,
				MarkdownDescription: "The Docker networks by kind (`llmnet`, `fetchnet`, `egressnet`): `id`, `name`, `subnet`, `gateway`, `internal`. " +
					"Empty on a cluster, where NetworkPolicies take their place.",
			},
			"proxy_url": schema.StringAttribute{
				Computed: true, MarkdownDescription: "`http://<proxy.ip>:<proxy.port>`, what FETCH sets as `http_proxy`/`https_proxy`. On a cluster, the proxy pod's " +
					"address as last read (FETCH's pods look it up afresh).",
			},
			"proxy_container_id": schema.StringAttribute{Computed: true, MarkdownDescription: "Docker id of the proxy container; on a cluster, the name of the proxy Deployment."},
			"firewall_rules": schema.ListAttribute{
				Computed: true, ElementType: types.StringType,
				MarkdownDescription: "The wanted rule set as data, in `iptables -S` form: the owned chains, their rules in order, and the jumps. Empty when the firewall is disabled. " +
					"On a cluster, the names of the topology's NetworkPolicies.",
			},
			"iptables_restore": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The rule set as `iptables-restore --noflush` input, for an operator to load at boot after Docker started. Empty when the firewall is disabled.",
			},
			"roles": schema.MapAttribute{
				Computed: true, ElementType: roleObjectType,
				MarkdownDescription: "Per role (`CORE`, `FETCH`, `TOOL_EXEC`): `networks` to join, `env` to set (FETCH gets `http_proxy`, " +
					"`https_proxy`, `no_proxy`), and `sandbox_network` for the execution sandbox (`none` for TOOL_EXEC).",
			},
			"drift": schema.ListAttribute{
				Computed: true, ElementType: types.StringType,
				MarkdownDescription: "What Read found different from the configuration (a missing network, a stopped proxy, a deleted rule, a " +
					"flushed `DOCKER-USER`, a jump below `RETURN`). Planned empty; a non-empty value means the next apply restores.",
			},
		},
	}
}

func (r *threegateNetworkResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = configureData(req.ProviderData, &resp.Diagnostics)
}

func (r *threegateNetworkResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m threegateNetworkModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	in, known, diags := m.toInput(ctx)
	resp.Diagnostics.Append(diags...)
	if in.Proxy.Port == 0 && m.Proxy != nil && !m.Proxy.Port.IsNull() && !m.Proxy.Port.IsUnknown() {
		resp.Diagnostics.AddAttributeError(path.Root("proxy").AtName("port"), "Invalid Proxy Port", "proxy.port: 0 is not a TCP port; use 1 to 65535.")
	}
	if !known {
		return // checked again at plan, when the values are known
	}
	_, ps := topologyBackend(ctx, r.data).Plan(in)
	addProblems(&resp.Diagnostics, ps)
}

// ModifyPlan plans the configuration on the provider's backend, fills
// every value the spec decides, keeps what the move from the state keeps,
// warns of what it widens, and adds what the backend can tell before
// apply.
func (r *threegateNetworkResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy
	}
	var plan, cfg threegateNetworkModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	var state *threegateNetworkModel
	if !req.State.Raw.IsNull() {
		state = &threegateNetworkModel{}
		resp.Diagnostics.Append(req.State.Get(ctx, state)...)
	}
	// The configuration, not the plan: in the plan every unset computed
	// attribute is unknown, in the configuration it is null, which means
	// "default", while unknown there means a value from elsewhere.
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b := topologyBackend(ctx, r.data)
	spec, known := cfg.plan(ctx, b, &resp.Diagnostics)
	if !known || resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(plan.setPlanned(ctx, spec, b.Planned(spec))...)
	if old, ok := state.priorSpec(ctx, b); ok {
		change := b.Compare(old, spec, len(state.Drift.Elements()) > 0)
		if change.KeepNetworks && plan.Networks.IsUnknown() {
			plan.Networks = state.Networks
		}
		if change.KeepProxy && spec.Proxy.Image != unknownImage {
			keepUnknown(&plan.ProxyContainerID, state.ProxyContainerID)
			keepUnknown(&plan.ProxyURL, state.ProxyURL)
			if plan.FirewallRules.IsUnknown() {
				plan.FirewallRules = state.FirewallRules
			}
		}
		if len(change.Opens) > 0 {
			resp.Diagnostics.AddWarning("ThreeGate Connectivity Widens",
				fmt.Sprintf("This change to topology %q is a security change; it opens:\n- %s\n\nReview it before applying.",
					spec.Name, strings.Join(change.Opens, "\n- ")))
		}
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
	if r.data == nil {
		return // unconfigured: nothing to ask
	}
	addProblems(&resp.Diagnostics, r.data.run.topology(spec))
	ps, err := b.Preflight(ctx, spec)
	addProblems(&resp.Diagnostics, ps)
	if err != nil {
		addFailure(&resp.Diagnostics, err, "ThreeGate Plan Check Failed", "checking topology "+spec.Name+" before apply")
	}
}

// keepUnknown takes the state's value for a planned value left unknown.
func keepUnknown(planned *types.String, state types.String) {
	if planned.IsUnknown() {
		*planned = state
	}
}

func (r *threegateNetworkResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan threegateNetworkModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	r.apply(ctx, &plan, &resp.Diagnostics)
	if plan.ID.IsUnknown() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	r.setIdentity(ctx, resp.Identity, plan.Name, &resp.Diagnostics)
}

// setIdentity records the topology's name and the backend it is on.
func (r *threegateNetworkResource) setIdentity(ctx context.Context, id *tfsdk.ResourceIdentity, name types.String, diags *diag.Diagnostics) {
	setIdentity(ctx, id, topologyIdentity{Name: name, Backend: types.StringValue(topologyBackend(ctx, r.data).Kind())}, diags)
}

func (r *threegateNetworkResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m threegateNetworkModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !requireProviderData(r.data, "threegate_network", &resp.Diagnostics) {
		return
	}
	// Set on every path out, a removal too: the framework wants an
	// identity after every Read without an error.
	b := topologyBackend(ctx, r.data)
	setIdentity(ctx, resp.Identity, topologyIdentity{Name: m.Name, Backend: types.StringValue(b.Kind())}, &resp.Diagnostics)
	if m.Proxy == nil { // importing: only the name is known
		spec, err := b.Import(ctx, m.Name.ValueString())
		if err != nil {
			addFailure(&resp.Diagnostics, err, "ThreeGate Import Failed", "reading topology "+m.Name.ValueString())
			return
		}
		resp.Diagnostics.Append(m.fromSpec(ctx, spec, b.Planned(spec))...)
	}
	spec, known := m.plan(ctx, b, &resp.Diagnostics)
	if !known || resp.Diagnostics.HasError() {
		return
	}
	st, err := b.Read(ctx, spec)
	if err != nil {
		addFailure(&resp.Diagnostics, err, "ThreeGate Read Failed", "inspecting topology "+spec.Name)
		return
	}
	if st.Gone {
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(m.setObserved(ctx, st)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *threegateNetworkResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan threegateNetworkModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	r.apply(ctx, &plan, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	r.setIdentity(ctx, resp.Identity, plan.Name, &resp.Diagnostics)
}

// apply brings the backend to the plan and fills the computed values that
// only apply knows. On error, m.ID stays unknown when nothing was made (a
// failure on an attribute: the backend touched nothing).
func (r *threegateNetworkResource) apply(ctx context.Context, m *threegateNetworkModel, diags *diag.Diagnostics) {
	if !requireProviderData(r.data, "threegate_network", diags) {
		return
	}
	b := topologyBackend(ctx, r.data)
	spec, known := m.plan(ctx, b, diags)
	if diags.HasError() {
		return
	}
	if !known || spec.Proxy.Image == unknownImage {
		addUnknownAtApplyError(diags, "threegate_network")
		return
	}
	planned := b.Planned(spec)
	diags.Append(m.setPlanned(ctx, spec, planned)...)
	diags.Append(m.setObserved(ctx, topospec.Status{ProxyID: planned.ProxyID, ProxyURL: planned.ProxyURL, Rules: planned.Rules})...)
	m.ID = types.StringUnknown()
	st, err := b.Apply(ctx, spec)
	var f *fault.StepError
	if errors.As(err, &f) && f.Field != "" {
		addFailure(diags, err, "", "")
		return
	}
	// From here on objects may exist, so the state must name them even if
	// the apply failed (Terraform then taints the resource and destroys it).
	m.ID = types.StringValue(spec.Name)
	if err != nil {
		addFailure(diags, err, "ThreeGate Apply Failed", "bringing topology "+spec.Name+" to its configuration")
		return
	}
	if len(st.Drift) > 0 {
		diags.AddError("ThreeGate Apply Did Not Converge", "after apply, the topology still differs:\n- "+strings.Join(st.Drift, "\n- "))
		st.Drift = nil // the state shows what apply made; the next Read shows the drift
	}
	diags.Append(m.setObserved(ctx, st)...)
}

func (r *threegateNetworkResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m threegateNetworkModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !requireProviderData(r.data, "threegate_network", &resp.Diagnostics) {
		return
	}
	name := m.Name.ValueString()
	if err := topologyBackend(ctx, r.data).Teardown(ctx, name); err != nil {
		addFailure(&resp.Diagnostics, err, "ThreeGate Destroy Failed", "removing topology "+name)
	}
}

// ImportState takes the topology's name, as an import ID or as the
// identity's name; an identity's backend must be the configured one.
func (r *threegateNetworkResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	b := topologyBackend(ctx, r.data)
	checkIdentityBackend(ctx, req, b.Kind(), "a topology", &resp.Diagnostics)
	name := importID(ctx, req, "name", &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	_, ps := b.Plan(topospec.Input{Name: name, Proxy: topospec.ProxyInput{Image: "x"}})
	for _, p := range ps {
		if p.Field == "name" {
			resp.Diagnostics.AddError("Invalid Import ID", "the import id (or the identity's name) is the topology name: "+p.Err.Error())
			return
		}
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), name)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), name)...)
}

// addFailure adds a topology backend's error: on its attribute when it
// names one, under its own words when it has them, else under summary and
// what.
func addFailure(diags *diag.Diagnostics, err error, summary, what string) {
	addErrors(diags, err, summary, what, nil)
}

// addProblems adds topology problems, each on its attribute.
func addProblems(diags *diag.Diagnostics, ps fault.List) {
	addErrors(diags, ps.Err(), "", "", nil)
}

// unknownImage stands in for a proxy image that is not known until apply.
const unknownImage = "(known after apply)"
