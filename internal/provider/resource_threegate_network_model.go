package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// The threegate_network model and its conversions, the same on every
// backend: toInput (model to the backend's input) one way; setPlanned,
// setObserved and fromSpec (what the backend planned, found or imported,
// back into the model) the other. What a backend has not (networks on a
// cluster) is null or empty because the spec and status say so.

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
	UpstreamCA   types.String `tfsdk:"upstream_ca"`
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
// Unset attributes stay unset ("" or nil), so a backend can tell what was
// asked of it from its defaults.
func (m *threegateNetworkModel) toInput(ctx context.Context) (topospec.Input, bool, diag.Diagnostics) {
	var diags diag.Diagnostics
	in := topospec.Input{Name: m.Name.ValueString(), Docker: topospec.DockerInput{Subnets: map[string]string{}, Gateways: map[string]string{}}}
	d := &in.Docker
	known := !m.Name.IsUnknown()
	for kind, v := range map[string]types.String{topospec.LLMNet: m.LLMNetSubnet, topospec.FetchNet: m.FetchNetSubnet, topospec.EgressNet: m.EgressNetSubnet} {
		known = known && !v.IsUnknown()
		if v.ValueString() != "" {
			d.Subnets[kind] = v.ValueString()
		}
	}
	for kind, v := range map[string]types.String{topospec.LLMNet: m.LLMNetGateway, topospec.FetchNet: m.FetchNetGateway, topospec.EgressNet: m.EgressNetGateway} {
		known = known && !v.IsUnknown()
		if v.ValueString() != "" {
			d.Gateways[kind] = v.ValueString()
		}
	}
	if m.Firewall != nil {
		known = known && !m.Firewall.Enabled.IsUnknown() && !m.Firewall.LogDenied.IsUnknown()
		d.Firewall = &topospec.Firewall{Enabled: m.Firewall.Enabled.ValueBool() || m.Firewall.Enabled.IsNull(), LogDenied: m.Firewall.LogDenied.ValueBool()}
	}
	if m.Proxy == nil {
		return in, false, diags
	}
	p := m.Proxy
	known = known && !p.IP.IsUnknown() && !p.EgressIP.IsUnknown() && !p.Port.IsUnknown()
	known = known && !p.UpstreamCA.IsUnknown()
	in.Proxy = topospec.ProxyInput{Image: p.Image.ValueString(), Port: int(p.Port.ValueInt64()), UpstreamCA: p.UpstreamCA.ValueString()}
	d.ProxyIP, d.EgressIP = p.IP.ValueString(), p.EgressIP.ValueString()
	if p.Image.IsUnknown() {
		// Often the tag of an image built in the same apply; it does not
		// affect validation, so stand in a placeholder and let the caller
		// check imageKnown where the real value matters.
		in.Proxy.Image = unknownImage
	}
	if !p.AllowPrivate.IsNull() {
		d.AllowPrivate = []string{}
	}
	for _, l := range []struct {
		v   types.List
		dst *[]string
	}{{p.Allow, &in.Proxy.Allow}, {p.AllowPrivate, &d.AllowPrivate}, {p.DNS, &in.Proxy.DNS}} {
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

// fromSpec fills the configuration from a topology the backend read back
// (import): the inputs as found, then every value the spec decides.
func (m *threegateNetworkModel) fromSpec(ctx context.Context, spec topospec.Spec, planned topospec.Planned) diag.Diagnostics {
	in := spec.Input()
	p := &proxyModel{
		Image: types.StringValue(in.Proxy.Image), AllowPrivate: listOrNull(ctx, in.Docker.AllowPrivate), DNS: listOrNull(ctx, in.Proxy.DNS),
		UpstreamCA: types.StringNull(),
	}
	if in.Proxy.UpstreamCA != "" {
		p.UpstreamCA = types.StringValue(in.Proxy.UpstreamCA)
	}
	var diags diag.Diagnostics
	p.Allow, diags = types.ListValueFrom(ctx, types.StringType, orEmpty(in.Proxy.Allow))
	m.Proxy = p
	if fw := in.Docker.Firewall; fw != nil {
		m.Firewall = &firewallModel{Enabled: types.BoolValue(fw.Enabled), LogDenied: types.BoolValue(fw.LogDenied)}
	}
	diags.Append(m.setPlanned(ctx, spec, planned)...)
	return diags
}

// setPlanned fills every value the spec decides: defaults of the optional
// inputs (subnets, gateways, proxy addresses and port; null where the
// backend has none) and the computed values known before apply; the rest
// is unknown.
func (m *threegateNetworkModel) setPlanned(ctx context.Context, spec topospec.Spec, p topospec.Planned) diag.Diagnostics {
	subnets := map[string]*types.String{topospec.LLMNet: &m.LLMNetSubnet, topospec.FetchNet: &m.FetchNetSubnet, topospec.EgressNet: &m.EgressNetSubnet}
	gateways := map[string]*types.String{topospec.LLMNet: &m.LLMNetGateway, topospec.FetchNet: &m.FetchNetGateway, topospec.EgressNet: &m.EgressNetGateway}
	for _, k := range topospec.Kinds {
		*subnets[k], *gateways[k] = types.StringNull(), types.StringNull()
		if n := spec.Network(k); n.Subnet.IsValid() {
			*subnets[k], *gateways[k] = types.StringValue(n.Subnet.String()), types.StringValue(n.Gateway.String())
		}
	}
	if len(spec.Docker.Networks) == 0 {
		m.Firewall = nil // no host firewall where there are no host networks
	}
	m.ID = types.StringValue(spec.Name)
	m.Proxy.IP, m.Proxy.EgressIP = addrOrNull(spec.Docker.ProxyIP.String(), spec.Docker.ProxyIP.IsValid()), addrOrNull(spec.Docker.EgressIP.String(), spec.Docker.EgressIP.IsValid())
	m.Proxy.Port = types.Int64Value(int64(spec.Proxy.Port))
	m.ProxyURL, m.ProxyContainerID = stringOrUnknown(p.ProxyURL), stringOrUnknown(p.ProxyID)
	m.FirewallRules, m.Networks = types.ListUnknown(types.StringType), types.MapUnknown(networkObjectType)
	var d1, d2, d3 diag.Diagnostics
	if p.Rules != nil {
		m.FirewallRules, d1 = types.ListValueFrom(ctx, types.StringType, p.Rules)
	}
	if p.Networks != nil {
		m.Networks, d2 = networksValue(ctx, p.Networks)
	}
	m.IptablesRestore = types.StringValue(p.Restore)
	m.Drift = types.ListValueMust(types.StringType, []attr.Value{})
	m.Roles, d3 = rolesValue(ctx, p.Roles)
	return append(append(d1, d2...), d3...)
}

// setObserved fills what the backend showed: the networks, the proxy, the
// enforcement and the drift.
func (m *threegateNetworkModel) setObserved(ctx context.Context, st topospec.Status) diag.Diagnostics {
	var d1, d2, d3 diag.Diagnostics
	m.Networks, d1 = networksValue(ctx, st.Networks)
	m.ProxyContainerID, m.ProxyURL = types.StringValue(st.ProxyID), types.StringValue(st.ProxyURL)
	m.FirewallRules, d2 = types.ListValueFrom(ctx, types.StringType, orEmpty(st.Rules))
	m.Drift, d3 = types.ListValueFrom(ctx, types.StringType, orEmpty(st.Drift))
	return append(append(d1, d2...), d3...)
}

// plan converts the model and plans it on the backend, adding any
// problem as an attribute error. known is false while a value is unknown;
// then nothing is planned. Callers go on only when known and diags has no
// error.
func (m *threegateNetworkModel) plan(ctx context.Context, b topospec.Backend, diags *diag.Diagnostics) (spec topospec.Spec, known bool) {
	in, known, d := m.toInput(ctx)
	diags.Append(d...)
	if !known || diags.HasError() {
		return spec, known
	}
	spec, ps := b.Plan(in)
	addProblems(diags, ps)
	return spec, true
}

// priorSpec is the spec of the state, if there is one and it is valid.
func (m *threegateNetworkModel) priorSpec(ctx context.Context, b topospec.Backend) (topospec.Spec, bool) {
	if m == nil {
		return topospec.Spec{}, false
	}
	var d diag.Diagnostics
	s, ok := m.plan(ctx, b, &d)
	return s, ok && !d.HasError()
}

func stringOrUnknown(s string) types.String {
	if s == "" {
		return types.StringUnknown()
	}
	return types.StringValue(s)
}

func addrOrNull(s string, valid bool) types.String {
	if !valid {
		return types.StringNull()
	}
	return types.StringValue(s)
}

func rolesValue(ctx context.Context, roles map[string]topospec.Role) (types.Map, diag.Diagnostics) {
	type roleModel struct {
		Networks       []string          `tfsdk:"networks"`
		Env            map[string]string `tfsdk:"env"`
		SandboxNetwork string            `tfsdk:"sandbox_network"`
	}
	out := map[string]roleModel{}
	for name, r := range roles {
		out[name] = roleModel{Networks: orEmpty(r.Networks), Env: r.Env, SandboxNetwork: r.SandboxNetwork}
	}
	return types.MapValueFrom(ctx, roleObjectType, out)
}

func networksValue(ctx context.Context, nets map[string]topospec.NetworkStatus) (types.Map, diag.Diagnostics) {
	type netModel struct {
		ID       string `tfsdk:"id"`
		Name     string `tfsdk:"name"`
		Subnet   string `tfsdk:"subnet"`
		Gateway  string `tfsdk:"gateway"`
		Internal bool   `tfsdk:"internal"`
	}
	out := map[string]netModel{}
	for kind, n := range nets {
		out[kind] = netModel(n)
	}
	return types.MapValueFrom(ctx, networkObjectType, out)
}
