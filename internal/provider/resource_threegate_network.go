package provider

import (
	"context"
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
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
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

type threegateNetworkModel struct {
	ID               types.String   `tfsdk:"id"`
	Name             types.String   `tfsdk:"name"`
	LLMNetSubnet     types.String   `tfsdk:"llmnet_subnet"`
	FetchNetSubnet   types.String   `tfsdk:"fetchnet_subnet"`
	EgressNetSubnet  types.String   `tfsdk:"egressnet_subnet"`
	LLMNetGateway    types.String   `tfsdk:"llmnet_gateway"`
	FetchNetGateway  types.String   `tfsdk:"fetchnet_gateway"`
	EgressNetGateway types.String   `tfsdk:"egressnet_gateway"`
	Proxy            *proxyModel    `tfsdk:"proxy"`
	Firewall         *firewallModel `tfsdk:"firewall"`
	Networks         types.Map      `tfsdk:"networks"`
	ProxyURL         types.String   `tfsdk:"proxy_url"`
	ProxyContainerID types.String   `tfsdk:"proxy_container_id"`
	FirewallRules    types.List     `tfsdk:"firewall_rules"`
	IptablesRestore  types.String   `tfsdk:"iptables_restore"`
	Roles            types.Map      `tfsdk:"roles"`
	Drift            types.List     `tfsdk:"drift"`
}

type proxyModel struct {
	Image        types.String `tfsdk:"image"`
	Allow        types.List   `tfsdk:"allow"`
	AllowPrivate types.List   `tfsdk:"allow_private"`
	IP           types.String `tfsdk:"ip"`
	EgressIP     types.String `tfsdk:"egress_ip"`
	Port         types.Int64  `tfsdk:"port"`
	DNS          types.List   `tfsdk:"dns"`
}

type firewallModel struct {
	Enabled   types.Bool `tfsdk:"enabled"`
	LogDenied types.Bool `tfsdk:"log_denied"`
}

var (
	networkObjectType = types.ObjectType{AttrTypes: map[string]attr.Type{
		"id": types.StringType, "name": types.StringType, "subnet": types.StringType,
		"gateway": types.StringType, "internal": types.BoolType,
	}}
	roleObjectType = types.ObjectType{AttrTypes: map[string]attr.Type{
		"networks": types.ListType{ElemType: types.StringType}, "env": types.MapType{ElemType: types.StringType},
		"sandbox_network": types.StringType,
	}}
	firewallAttrTypes = map[string]attr.Type{"enabled": types.BoolType, "log_denied": types.BoolType}
)

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
					"the proxy container (`<name>-proxy`) and the chains. Changing it replaces the topology.", topology.MaxNameLen),
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
						MarkdownDescription: fmt.Sprintf("Port the proxy listens on (on its `fetchnet` address only). Defaults to %d.", topology.DefaultProxyPort),
					},
					"dns": schema.ListAttribute{
						Optional: true, ElementType: types.StringType,
						MarkdownDescription: "IPv4 DNS servers the proxy resolves with. When set, the firewall lets the proxy's DNS go only to them; " +
							"when empty, to any address on port 53, and the proxy uses the container's resolver.",
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
				MarkdownDescription: "The Docker networks by kind (`llmnet`, `fetchnet`, `egressnet`): `id`, `name`, `subnet`, `gateway`, `internal`.",
			},
			"proxy_url": schema.StringAttribute{
				Computed: true, MarkdownDescription: "`http://<proxy.ip>:<proxy.port>`, what FETCH sets as `http_proxy`/`https_proxy`.",
			},
			"proxy_container_id": schema.StringAttribute{Computed: true, MarkdownDescription: "Docker id of the proxy container."},
			"firewall_rules": schema.ListAttribute{
				Computed: true, ElementType: types.StringType,
				MarkdownDescription: "The wanted rule set as data, in `iptables -S` form: the owned chains, their rules in order, and the jumps. Empty when the firewall is disabled.",
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

// toInput converts the model; ok is false while a value is unknown.
func (m *threegateNetworkModel) toInput(ctx context.Context) (topology.Input, bool, diag.Diagnostics) {
	var diags diag.Diagnostics
	in := topology.Input{Name: m.Name.ValueString(), Subnets: map[string]string{}, Gateways: map[string]string{}}
	known := !m.Name.IsUnknown()
	for kind, v := range map[string]types.String{topology.LLMNet: m.LLMNetSubnet, topology.FetchNet: m.FetchNetSubnet, topology.EgressNet: m.EgressNetSubnet} {
		known = known && !v.IsUnknown()
		in.Subnets[kind] = v.ValueString()
	}
	for kind, v := range map[string]types.String{topology.LLMNet: m.LLMNetGateway, topology.FetchNet: m.FetchNetGateway, topology.EgressNet: m.EgressNetGateway} {
		known = known && !v.IsUnknown()
		in.Gateways[kind] = v.ValueString()
	}
	in.Firewall = topology.Firewall{Enabled: true}
	if m.Firewall != nil {
		known = known && !m.Firewall.Enabled.IsUnknown() && !m.Firewall.LogDenied.IsUnknown()
		in.Firewall = topology.Firewall{Enabled: m.Firewall.Enabled.ValueBool() || m.Firewall.Enabled.IsNull(), LogDenied: m.Firewall.LogDenied.ValueBool()}
	}
	if m.Proxy == nil {
		return in, false, diags
	}
	p := m.Proxy
	known = known && !p.IP.IsUnknown() && !p.EgressIP.IsUnknown() && !p.Port.IsUnknown()
	in.Proxy = topology.ProxyInput{Image: p.Image.ValueString(), IP: p.IP.ValueString(), EgressIP: p.EgressIP.ValueString(), Port: int(p.Port.ValueInt64())}
	if p.Image.IsUnknown() {
		// Often the tag of an image built in the same apply; it does not
		// affect validation, so stand in a placeholder and let the caller
		// check imageKnown where the real value matters.
		in.Proxy.Image = unknownImage
	}
	for _, l := range []struct {
		v   types.List
		dst *[]string
	}{{p.Allow, &in.Proxy.Allow}, {p.AllowPrivate, &in.Proxy.AllowPrivate}, {p.DNS, &in.Proxy.DNS}} {
		if l.v.IsUnknown() {
			known = false
			continue
		}
		var elems []types.String
		diags.Append(l.v.ElementsAs(ctx, &elems, false)...)
		for _, e := range elems {
			if e.IsUnknown() {
				known = false
			}
			*l.dst = append(*l.dst, e.ValueString())
		}
	}
	return in, known, diags
}

// buildSpec converts the model and builds its topology, adding any problem
// as an attribute error. known is false while a value is unknown; then the
// spec is not built. Callers go on only when known and diags has no error.
func (m *threegateNetworkModel) buildSpec(ctx context.Context, diags *diag.Diagnostics) (spec topology.Spec, known bool) {
	in, known, d := m.toInput(ctx)
	diags.Append(d...)
	if !known || diags.HasError() {
		return spec, known
	}
	spec, ps := topology.Build(in)
	addProblems(diags, ps)
	return spec, true
}

// addProblems turns topology problems into attribute errors.
func addProblems(diags *diag.Diagnostics, ps topology.Problems) {
	for _, p := range ps {
		at := path.Root(p.Field)
		detail := p.Detail
		if p.Sub != "" {
			at = at.AtName(p.Sub)
		}
		if p.Index >= 0 {
			at = at.AtListIndex(p.Index)
		}
		if p.Sub != "" {
			// Terraform points at the whole resource block for errors inside
			// a nested attribute, so name the attribute in the text.
			detail = at.String() + ": " + detail
		}
		diags.AddAttributeError(at, p.Summary, detail)
	}
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
	_, ps := topology.Build(in)
	addProblems(&resp.Diagnostics, ps)
}

func (r *threegateNetworkResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy
	}
	var plan threegateNetworkModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var state *threegateNetworkModel
	if !req.State.Raw.IsNull() {
		state = &threegateNetworkModel{}
		resp.Diagnostics.Append(req.State.Get(ctx, state)...)
	}
	// The configuration, not the plan: in the plan every unset computed
	// attribute is unknown, in the configuration it is null, which means
	// "default", while unknown there means a value from elsewhere.
	var cfg threegateNetworkModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	spec, known := cfg.buildSpec(ctx, &resp.Diagnostics)
	if !known || resp.Diagnostics.HasError() {
		return
	}

	// Fill every value the spec decides, so the plan shows it.
	set := func(p path.Path, v attr.Value) { resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, p, v)...) }
	for _, n := range spec.Networks {
		set(path.Root(n.Kind+"_subnet"), types.StringValue(n.Subnet.String()))
		set(path.Root(n.Kind+"_gateway"), types.StringValue(n.Gateway.String()))
	}
	set(path.Root("id"), types.StringValue(spec.Name))
	set(path.Root("proxy").AtName("ip"), types.StringValue(spec.Proxy.IP.String()))
	set(path.Root("proxy").AtName("egress_ip"), types.StringValue(spec.Proxy.EgressIP.String()))
	set(path.Root("proxy").AtName("port"), types.Int64Value(int64(spec.Proxy.Port)))
	set(path.Root("proxy_url"), types.StringValue(spec.Proxy.URL()))
	rules, restore := firewallValues(spec)
	set(path.Root("firewall_rules"), rules)
	set(path.Root("iptables_restore"), types.StringValue(restore))
	roles, d := rolesValue(ctx, spec)
	resp.Diagnostics.Append(d...)
	set(path.Root("roles"), roles)
	set(path.Root("drift"), types.ListValueMust(types.StringType, []attr.Value{}))

	var old *topology.Spec
	if state != nil {
		if oin, ok, _ := state.toInput(ctx); ok {
			if o, ops := topology.Build(oin); len(ops) == 0 {
				old = &o
			}
		}
	}
	// Networks and the proxy keep their ids unless they change or drifted.
	drifted := state != nil && len(state.Drift.Elements()) > 0
	netsSame := old != nil && !drifted
	if old != nil {
		for _, k := range topology.Kinds {
			a, b := old.Network(k), spec.Network(k)
			netsSame = netsSame && a.Subnet == b.Subnet && a.Gateway == b.Gateway
		}
	}
	if netsSame {
		set(path.Root("networks"), state.Networks)
	} else {
		set(path.Root("networks"), types.MapUnknown(networkObjectType))
	}
	if netsSame && spec.Proxy.Image != unknownImage && topology.ProxyConfigHash(*old) == topology.ProxyConfigHash(spec) {
		set(path.Root("proxy_container_id"), state.ProxyContainerID)
	} else {
		set(path.Root("proxy_container_id"), types.StringUnknown())
	}

	if old != nil {
		if opens := topology.Widening(*old, spec); len(opens) > 0 {
			resp.Diagnostics.AddWarning("ThreeGate Connectivity Widens",
				fmt.Sprintf("This change to topology %q is a security change; it opens:\n- %s\n\nReview it before applying.",
					spec.Name, strings.Join(opens, "\n- ")))
		}
	}

	if r.data == nil {
		return
	}
	// What can be known about the host at plan time: the daemon's
	// networks, the host's routes, iptables, the engine version.
	cli := r.data.dockerClient(ctx, &resp.Diagnostics)
	if cli == nil {
		return
	}
	conflicts, err := topology.Conflicts(ctx, cli, spec, dockerIsLocal(r.data))
	if err != nil {
		addRuntimeError(&resp.Diagnostics, "Cannot Check Subnets", "listing Docker networks and host routes", err)
		return
	}
	addProblems(&resp.Diagnostics, conflicts)
	preflight(ctx, r.data, spec, &resp.Diagnostics)
}

// preflight checks iptables and DOCKER-USER (errors) and the engine
// version (a warning for CVE-2024-29018).
func preflight(ctx context.Context, d *providerData, spec topology.Spec, diags *diag.Diagnostics) {
	if spec.Firewall.Enabled {
		if _, err := firewall.Open(ctx); err != nil {
			diags.AddAttributeError(path.Root("firewall").AtName("enabled"), "Host Firewall Unavailable", err.Error())
		}
	}
	cli := d.dockerClient(ctx, diags)
	if cli == nil {
		return
	}
	v, err := cli.ServerVersion(ctx)
	if err != nil {
		addRuntimeError(diags, "Cannot Read Docker Version", "asking the daemon for its version", err)
		return
	}
	if topology.EngineLeaksDNS(v.Version) {
		diags.AddWarning("Docker Engine Affected By CVE-2024-29018",
			fmt.Sprintf("Docker Engine %s forwards DNS queries of containers on internal networks through the host's namespace "+
				"(CVE-2024-29018, fixed in 26.0.0, 25.0.4 and 23.0.11), so ThreeGate's internal networks can leak data over DNS. "+
				"Upgrade the engine, or confirm your distribution backported the fix. The host firewall does not see these queries.", v.Version))
	}
}

func firewallValues(spec topology.Spec) (types.List, string) {
	if !spec.Firewall.Enabled {
		return types.ListValueMust(types.StringType, []attr.Value{}), ""
	}
	set := spec.Rules()
	var vals []attr.Value
	for _, l := range set.Lines() {
		vals = append(vals, types.StringValue(l))
	}
	return types.ListValueMust(types.StringType, vals), set.RestoreText()
}

func rolesValue(ctx context.Context, spec topology.Spec) (types.Map, diag.Diagnostics) {
	type roleModel struct {
		Networks       []string          `tfsdk:"networks"`
		Env            map[string]string `tfsdk:"env"`
		SandboxNetwork string            `tfsdk:"sandbox_network"`
	}
	out := map[string]roleModel{}
	for name, r := range spec.Roles() {
		out[name] = roleModel{Networks: r.Networks, Env: r.Env, SandboxNetwork: r.SandboxNetwork}
	}
	return types.MapValueFrom(ctx, roleObjectType, out)
}

func networksValue(ctx context.Context, spec topology.Spec, o topology.Observed) (types.Map, diag.Diagnostics) {
	type netModel struct {
		ID       string `tfsdk:"id"`
		Name     string `tfsdk:"name"`
		Subnet   string `tfsdk:"subnet"`
		Gateway  string `tfsdk:"gateway"`
		Internal bool   `tfsdk:"internal"`
	}
	out := map[string]netModel{}
	for _, n := range spec.Networks {
		on, ok := o.Networks[n.Kind]
		if !ok {
			continue
		}
		out[n.Kind] = netModel{ID: on.ID, Name: on.Name, Subnet: on.Subnet, Gateway: on.Gateway, Internal: on.Internal}
	}
	return types.MapValueFrom(ctx, networkObjectType, out)
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
}

func (r *threegateNetworkResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m threegateNetworkModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !requireProviderData(r.data, "threegate_network", &resp.Diagnostics) {
		return
	}
	cli := r.data.dockerClient(ctx, &resp.Diagnostics)
	if cli == nil {
		return
	}
	importing := m.Proxy == nil
	if importing {
		if !r.importFromLive(ctx, &m, &resp.Diagnostics) {
			return
		}
	}
	spec, known := m.buildSpec(ctx, &resp.Diagnostics)
	if !known || resp.Diagnostics.HasError() {
		return
	}
	obs, err := topology.Observe(ctx, cli, spec)
	if err != nil {
		addRuntimeError(&resp.Diagnostics, "ThreeGate Read Failed", "inspecting topology "+spec.Name, err)
		return
	}
	drift := topology.Drift(spec, obs)
	rulesLeft := false
	if h, err := firewall.Open(ctx); err == nil {
		set := spec.Rules()
		live, err := h.Read(ctx, set)
		if err != nil {
			addRuntimeError(&resp.Diagnostics, "Firewall Read Failed", "reading the rules of "+spec.Name, err)
			return
		}
		rulesLeft = len(live.Chains) > 0
		if spec.Firewall.Enabled {
			drift = append(drift, firewall.Diff(set, live)...)
		} else if rulesLeft {
			drift = append(drift, "the firewall is disabled but chains of this topology are still present")
		}
	} else if spec.Firewall.Enabled {
		drift = append(drift, "the host firewall cannot be read: "+err.Error())
	}
	if len(obs.Networks) == 0 && obs.Proxy == nil && !rulesLeft {
		tflog.Info(ctx, "threegate topology gone; removing from state", map[string]any{"name": spec.Name})
		resp.State.RemoveResource(ctx)
		return
	}
	nets, d := networksValue(ctx, spec, obs)
	resp.Diagnostics.Append(d...)
	m.Networks = nets
	m.ProxyContainerID = types.StringValue("")
	if obs.Proxy != nil {
		m.ProxyContainerID = types.StringValue(obs.Proxy.ID)
	}
	dv, d := types.ListValueFrom(ctx, types.StringType, orEmpty(drift))
	resp.Diagnostics.Append(d...)
	m.Drift = dv
	if len(drift) > 0 {
		tflog.Warn(ctx, "threegate drift", map[string]any{"name": spec.Name, "drift": drift})
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// importFromLive reconstructs the configuration from the live objects
// (topology.InputFromLive) and the firewall settings from the chains.
func (r *threegateNetworkResource) importFromLive(ctx context.Context, m *threegateNetworkModel, diags *diag.Diagnostics) bool {
	cli := r.data.dockerClient(ctx, diags)
	if cli == nil {
		return false
	}
	name := m.Name.ValueString()
	in, err := topology.InputFromLive(ctx, cli, name)
	if err != nil {
		diags.AddError("ThreeGate Import Failed", fmt.Sprintf("topology %q cannot be read from Docker: %v", name, err))
		return false
	}
	m.LLMNetSubnet, m.FetchNetSubnet, m.EgressNetSubnet = types.StringValue(in.Subnets[topology.LLMNet]),
		types.StringValue(in.Subnets[topology.FetchNet]), types.StringValue(in.Subnets[topology.EgressNet])
	m.LLMNetGateway, m.FetchNetGateway, m.EgressNetGateway = types.StringValue(in.Gateways[topology.LLMNet]),
		types.StringValue(in.Gateways[topology.FetchNet]), types.StringValue(in.Gateways[topology.EgressNet])
	p := &proxyModel{
		Image: types.StringValue(in.Proxy.Image), IP: types.StringValue(in.Proxy.IP),
		EgressIP: types.StringValue(in.Proxy.EgressIP), Port: types.Int64Value(int64(in.Proxy.Port)),
		AllowPrivate: listOrNull(ctx, in.Proxy.AllowPrivate), DNS: listOrNull(ctx, in.Proxy.DNS),
	}
	p.Allow, _ = types.ListValueFrom(ctx, types.StringType, orEmpty(in.Proxy.Allow))
	m.Proxy = p
	fwm := &firewallModel{Enabled: types.BoolValue(false), LogDenied: types.BoolValue(false)}
	if h, err := firewall.Open(ctx); err == nil {
		set := firewall.Build(firewall.Params{Name: name})
		if live, err := h.Read(ctx, set); err == nil {
			if rules, ok := live.Chains[firewall.ForwardChain(name)]; ok {
				fwm.Enabled = types.BoolValue(true)
				for _, l := range rules {
					if strings.Contains(l, " -j LOG ") {
						fwm.LogDenied = types.BoolValue(true)
					}
				}
			}
		}
	}
	m.Firewall = fwm
	m.ID = types.StringValue(name)
	in.Firewall = topology.Firewall{Enabled: fwm.Enabled.ValueBool(), LogDenied: fwm.LogDenied.ValueBool()}
	spec, ps := topology.Build(in)
	if len(ps) > 0 {
		diags.AddError("ThreeGate Import Failed", fmt.Sprintf("topology %q as found is not valid: %v", name, ps[0]))
		return false
	}
	m.ProxyURL = types.StringValue(spec.Proxy.URL())
	rules, restore := firewallValues(spec)
	m.FirewallRules, m.IptablesRestore = rules, types.StringValue(restore)
	roles, d := rolesValue(ctx, spec)
	diags.Append(d...)
	m.Roles = roles
	tflog.Debug(ctx, "imported threegate topology", map[string]any{"name": name, "allow_entries": len(in.Proxy.Allow)})
	return true
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
}

// apply brings the host to the plan and fills the computed values that
// only apply knows. On error, m.ID stays unknown when nothing was made.
func (r *threegateNetworkResource) apply(ctx context.Context, m *threegateNetworkModel, diags *diag.Diagnostics) {
	m.ID = types.StringUnknown()
	m.Networks = types.MapValueMust(networkObjectType, map[string]attr.Value{})
	m.ProxyContainerID = types.StringValue("")
	m.Drift = types.ListValueMust(types.StringType, []attr.Value{})
	spec, known := m.buildSpec(ctx, diags)
	if !known || spec.Proxy.Image == unknownImage {
		addUnknownAtApplyError(diags, "threegate_network")
		return
	}
	if diags.HasError() {
		return
	}
	if !requireProviderData(r.data, "threegate_network", diags) {
		return
	}
	cli := r.data.dockerClient(ctx, diags)
	if cli == nil {
		return
	}
	var fw *firewall.Host
	if spec.Firewall.Enabled {
		h, err := firewall.Open(ctx)
		if err != nil {
			diags.AddAttributeError(path.Root("firewall").AtName("enabled"), "Host Firewall Unavailable", err.Error())
			return
		}
		fw = h
	}
	// From here on objects may exist, so the state must name them even if
	// the apply fails (Terraform then taints the resource and destroys it).
	m.ID = types.StringValue(spec.Name)
	tflog.Debug(ctx, "ensuring threegate topology", map[string]any{"name": spec.Name, "firewall": spec.Firewall.Enabled})
	obs, err := topology.Ensure(ctx, cli, spec, func(ctx context.Context) error {
		if fw != nil {
			return fw.Apply(ctx, spec.Rules())
		}
		// Disabled: remove what an earlier apply made, if anything.
		h, err := firewall.Open(ctx)
		if err != nil {
			return nil // no iptables, so no rules of ours either
		}
		return h.Remove(ctx, spec.Rules())
	})
	if err != nil {
		addRuntimeError(diags, "ThreeGate Apply Failed", "bringing topology "+spec.Name+" to its configuration", err)
		return
	}
	m.ID = types.StringValue(spec.Name)
	var drift []string
	drift = append(drift, topology.Drift(spec, obs)...)
	if fw != nil {
		fd, err := fw.Check(ctx, spec.Rules())
		if err != nil {
			addRuntimeError(diags, "Firewall Read Failed", "reading back the rules of "+spec.Name, err)
			return
		}
		drift = append(drift, fd...)
	}
	if len(drift) > 0 {
		diags.AddError("ThreeGate Apply Did Not Converge", "after apply, the host still differs:\n- "+strings.Join(drift, "\n- "))
	}
	nets, d := networksValue(ctx, spec, obs)
	diags.Append(d...)
	m.Networks = nets
	m.ProxyContainerID = types.StringValue("")
	if obs.Proxy != nil {
		m.ProxyContainerID = types.StringValue(obs.Proxy.ID)
	}
	m.Drift = types.ListValueMust(types.StringType, []attr.Value{})
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func listOrNull(ctx context.Context, s []string) types.List {
	if len(s) == 0 {
		return types.ListNull(types.StringType)
	}
	v, _ := types.ListValueFrom(ctx, types.StringType, s)
	return v
}

func (r *threegateNetworkResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m threegateNetworkModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !requireProviderData(r.data, "threegate_network", &resp.Diagnostics) {
		return
	}
	spec, known := m.buildSpec(ctx, &resp.Diagnostics)
	if !known {
		addUnknownAtApplyError(&resp.Diagnostics, "threegate_network")
	}
	if resp.Diagnostics.HasError() {
		return
	}
	cli := r.data.dockerClient(ctx, &resp.Diagnostics)
	if cli == nil {
		return
	}
	// Containers and networks first: while a member is still attached the
	// rules keep protecting it, so they go last.
	if err := topology.Destroy(ctx, cli, spec); err != nil {
		addRuntimeError(&resp.Diagnostics, "ThreeGate Destroy Failed", "removing the proxy and networks of "+spec.Name, err)
		return
	}
	if h, err := firewall.Open(ctx); err == nil {
		if err := h.Remove(ctx, spec.Rules()); err != nil {
			addRuntimeError(&resp.Diagnostics, "ThreeGate Destroy Failed", "removing the firewall rules of "+spec.Name, err)
		}
	}
}

func (r *threegateNetworkResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if _, ps := topology.Build(topology.Input{Name: req.ID, Proxy: topology.ProxyInput{Image: "x"}}); len(ps) > 0 {
		resp.Diagnostics.AddError("Invalid Import ID", "the import id is the topology name: "+ps[0].Detail)
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
}

// unknownImage stands in for a proxy image that is not known until apply.
const unknownImage = "(known after apply)"

// dockerIsLocal reports whether the daemon runs on this machine (a unix
// socket), so that this host's routes and iptables are the daemon's.
func dockerIsLocal(d *providerData) bool {
	return strings.HasPrefix(engine.HostOf(d.docker.opts), "unix://")
}
