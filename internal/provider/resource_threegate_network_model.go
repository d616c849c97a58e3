package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
)

// The threegate_network model and its conversions: toInput (model to the
// topology service's input) one way; setPlanned, setObserved and fromInput
// (what the service decided, found or imported, back into the model) the
// other.

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

// fromInput fills the configuration from a topology read back from the
// host (import): the inputs as found, then every value the spec decides.
func (m *threegateNetworkModel) fromInput(ctx context.Context, in topology.Input, spec topology.Spec) diag.Diagnostics {
	p := &proxyModel{
		Image: types.StringValue(in.Proxy.Image), AllowPrivate: listOrNull(ctx, in.Proxy.AllowPrivate), DNS: listOrNull(ctx, in.Proxy.DNS),
	}
	var diags diag.Diagnostics
	p.Allow, diags = types.ListValueFrom(ctx, types.StringType, orEmpty(in.Proxy.Allow))
	m.Proxy = p
	m.Firewall = &firewallModel{Enabled: types.BoolValue(in.Firewall.Enabled), LogDenied: types.BoolValue(in.Firewall.LogDenied)}
	diags.Append(m.setPlanned(ctx, spec)...)
	return diags
}

// setPlanned fills every value the spec decides: defaults of the optional
// inputs (subnets, gateways, proxy addresses and port) and the computed
// values known before apply.
func (m *threegateNetworkModel) setPlanned(ctx context.Context, spec topology.Spec) diag.Diagnostics {
	subnets := map[string]*types.String{topology.LLMNet: &m.LLMNetSubnet, topology.FetchNet: &m.FetchNetSubnet, topology.EgressNet: &m.EgressNetSubnet}
	gateways := map[string]*types.String{topology.LLMNet: &m.LLMNetGateway, topology.FetchNet: &m.FetchNetGateway, topology.EgressNet: &m.EgressNetGateway}
	for _, n := range spec.Networks {
		*subnets[n.Kind], *gateways[n.Kind] = types.StringValue(n.Subnet.String()), types.StringValue(n.Gateway.String())
	}
	m.ID = types.StringValue(spec.Name)
	m.Proxy.IP, m.Proxy.EgressIP = types.StringValue(spec.Proxy.IP.String()), types.StringValue(spec.Proxy.EgressIP.String())
	m.Proxy.Port = types.Int64Value(int64(spec.Proxy.Port))
	m.ProxyURL = types.StringValue(spec.Proxy.URL())
	rules, restore := firewallValues(spec)
	m.FirewallRules, m.IptablesRestore = rules, types.StringValue(restore)
	m.Drift = types.ListValueMust(types.StringType, []attr.Value{})
	var diags diag.Diagnostics
	m.Roles, diags = rolesValue(ctx, spec)
	return diags
}

// setObserved fills what the host showed: the networks, the proxy
// container and the drift.
func (m *threegateNetworkModel) setObserved(ctx context.Context, spec topology.Spec, st topology.Status) diag.Diagnostics {
	var d1, d2 diag.Diagnostics
	m.Networks, d1 = networksValue(ctx, spec, st.Observed)
	m.ProxyContainerID = types.StringValue("")
	if st.Proxy != nil {
		m.ProxyContainerID = types.StringValue(st.Proxy.ID)
	}
	m.Drift, d2 = types.ListValueFrom(ctx, types.StringType, orEmpty(st.Drift))
	return append(d1, d2...)
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

// priorSpec is the spec of the state, if there is one and it is valid.
func (m *threegateNetworkModel) priorSpec(ctx context.Context) (topology.Spec, bool) {
	if m == nil {
		return topology.Spec{}, false
	}
	in, ok, _ := m.toInput(ctx)
	if !ok {
		return topology.Spec{}, false
	}
	s, ps := topology.Build(in)
	return s, len(ps) == 0
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
