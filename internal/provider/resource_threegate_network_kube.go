package provider

import (
	"context"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubetopology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
)

// threegate_network on a cluster: the same schema over kubetopology. What
// names Docker networks, pinned addresses or the host firewall has no
// meaning there and is refused at plan; the computed values say what the
// cluster holds instead (networks empty, firewall_rules the
// NetworkPolicies' names, proxy_container_id the proxy Deployment).

// kubeTopologyService is the topology service on the provider's cluster,
// or nil after adding why there is none.
func kubeTopologyService(ctx context.Context, d *providerData, diags *diag.Diagnostics) *kubetopology.Service {
	c, err := d.kube.Client()
	if err != nil {
		addRuntimeError(diags, "Kubernetes Unreachable", "connecting to the cluster", err)
		return nil
	}
	return kubetopology.NewService(c, kubetopology.Options{Logger: loggerFor(ctx)})
}

// kubeRefusals are the attributes set in cfg that a cluster cannot honour.
func kubeRefusals(cfg threegateNetworkModel, diags *diag.Diagnostics) {
	refuse := func(p path.Path, why string) {
		diags.AddAttributeError(p, "Not On Kubernetes", p.String()+": "+why)
	}
	for name, v := range map[string]types.String{
		"llmnet_subnet": cfg.LLMNetSubnet, "fetchnet_subnet": cfg.FetchNetSubnet, "egressnet_subnet": cfg.EgressNetSubnet,
		"llmnet_gateway": cfg.LLMNetGateway, "fetchnet_gateway": cfg.FetchNetGateway, "egressnet_gateway": cfg.EgressNetGateway,
	} {
		if !v.IsNull() {
			refuse(path.Root(name), "a cluster has no Docker networks; the topology's NetworkPolicies take their place. Remove it.")
		}
	}
	if p := cfg.Proxy; p != nil {
		if !p.IP.IsNull() || !p.EgressIP.IsNull() {
			refuse(path.Root("proxy").AtName("ip"), "the proxy is a pod; the cluster gives its address. Remove proxy.ip and proxy.egress_ip.")
		}
		if !p.AllowPrivate.IsNull() {
			refuse(path.Root("proxy").AtName("allow_private"), "on a cluster the proxy never reaches private addresses (its policy allows public ones only). Remove it.")
		}
	}
	if cfg.Firewall != nil {
		refuse(path.Root("firewall"), "a cluster enforces the topology with NetworkPolicies, always; there is no host firewall to turn on or off. Remove it.")
	}
}

// kubeInput is the model as kubetopology's input; ok is false while a
// value is unknown.
func (m *threegateNetworkModel) kubeInput(ctx context.Context, diags *diag.Diagnostics) (kubetopology.Input, bool) {
	in, known, d := m.toInput(ctx)
	diags.Append(d...)
	return kubetopology.Input{Name: in.Name, Proxy: kubetopology.ProxyInput{
		Image: in.Proxy.Image, Allow: in.Proxy.Allow, Port: in.Proxy.Port, DNS: in.Proxy.DNS,
	}}, known && m.Proxy != nil
}

// kubeSpec builds the cluster spec, adding its problems on their attributes.
func (m *threegateNetworkModel) kubeSpec(ctx context.Context, diags *diag.Diagnostics) (kubetopology.Spec, bool) {
	in, known := m.kubeInput(ctx, diags)
	if !known || diags.HasError() {
		return kubetopology.Spec{}, false
	}
	spec, ps := kubetopology.Build(in)
	addProblems(diags, ps)
	return spec, !diags.HasError()
}

// setKubePlanned fills what the spec decides on a cluster; the proxy's
// URL and the policy names are unknown until apply unless kept.
func (m *threegateNetworkModel) setKubePlanned(spec kubetopology.Spec) {
	m.ID = types.StringValue(spec.Name)
	for _, v := range []*types.String{&m.LLMNetSubnet, &m.FetchNetSubnet, &m.EgressNetSubnet, &m.LLMNetGateway, &m.FetchNetGateway, &m.EgressNetGateway} {
		*v = types.StringNull()
	}
	m.Proxy.IP, m.Proxy.EgressIP = types.StringNull(), types.StringNull()
	m.Proxy.Port = types.Int64Value(int64(spec.Proxy.Port))
	m.Firewall = nil
	m.Networks = types.MapValueMust(networkObjectType, map[string]attr.Value{})
	m.IptablesRestore = types.StringValue("")
	m.ProxyContainerID = types.StringValue(kubetopology.ProxyName(spec.Name))
	m.Roles = kubeRoles()
	m.Drift = types.ListValueMust(types.StringType, []attr.Value{})
	m.ProxyURL, m.FirewallRules = types.StringUnknown(), types.ListUnknown(types.StringType)
}

// kubeRoles are the roles with no networks to join: on a cluster a member
// is placed by its labels.
func kubeRoles() types.Map {
	roles := map[string]attr.Value{}
	for _, r := range []string{topology.RoleCore, topology.RoleFetch, topology.RoleToolExec} {
		roles[r] = types.ObjectValueMust(roleObjectType.AttrTypes, map[string]attr.Value{
			"networks":        types.ListValueMust(types.StringType, []attr.Value{}),
			"env":             types.MapValueMust(types.StringType, map[string]attr.Value{}),
			"sandbox_network": types.StringValue(""),
		})
	}
	return types.MapValueMust(roleObjectType, roles)
}

// setKubeObserved records what the cluster showed.
func (m *threegateNetworkModel) setKubeObserved(ctx context.Context, st kubetopology.Status) diag.Diagnostics {
	var d1, d2 diag.Diagnostics
	m.ProxyURL = types.StringValue(st.ProxyURL)
	m.FirewallRules, d1 = types.ListValueFrom(ctx, types.StringType, orEmpty(st.Policies))
	m.Drift, d2 = types.ListValueFrom(ctx, types.StringType, orEmpty(st.Drift))
	return append(d1, d2...)
}

func (r *threegateNetworkResource) kubeModifyPlan(ctx context.Context, plan, cfg threegateNetworkModel, state *threegateNetworkModel, diags *diag.Diagnostics) (threegateNetworkModel, bool) {
	kubeRefusals(cfg, diags)
	spec, ok := cfg.kubeSpec(ctx, diags)
	if !ok {
		return plan, false
	}
	plan.setKubePlanned(spec)
	if state != nil && len(state.Drift.Elements()) == 0 {
		if old, ok := state.kubeSpec(ctx, &diag.Diagnostics{}); ok && kubetopology.ConfigHash(old) == kubetopology.ConfigHash(spec) {
			plan.ProxyURL, plan.FirewallRules = state.ProxyURL, state.FirewallRules
		}
	}
	return plan, true
}

func (r *threegateNetworkResource) kubeApply(ctx context.Context, m *threegateNetworkModel, diags *diag.Diagnostics) {
	spec, ok := m.kubeSpec(ctx, diags)
	if !ok {
		if !diags.HasError() {
			addUnknownAtApplyError(diags, "threegate_network")
		}
		return
	}
	svc := kubeTopologyService(ctx, r.data, diags)
	if svc == nil {
		return
	}
	m.setKubePlanned(spec)
	st, err := svc.Apply(ctx, spec)
	if err != nil {
		addRuntimeError(diags, "ThreeGate Apply Failed", "bringing topology "+spec.Name+" to its configuration on the cluster", err)
		return
	}
	if len(st.Drift) > 0 {
		diags.AddError("ThreeGate Apply Did Not Converge", "after apply, the cluster still differs:\n- "+strings.Join(st.Drift, "\n- "))
		st.Drift = nil
	}
	diags.Append(m.setKubeObserved(ctx, st)...)
}

// kubeRead reads the topology back; gone means out of state. An import
// (no proxy block yet) takes the inputs from the proxy Deployment.
func (r *threegateNetworkResource) kubeRead(ctx context.Context, m *threegateNetworkModel, diags *diag.Diagnostics) (gone bool) {
	svc := kubeTopologyService(ctx, r.data, diags)
	if svc == nil {
		return false
	}
	if m.Proxy == nil {
		spec, err := svc.Import(ctx, m.Name.ValueString())
		if err != nil {
			diags.AddError("ThreeGate Import Failed", err.Error())
			return false
		}
		in := spec.Input()
		var d diag.Diagnostics
		m.Proxy = &proxyModel{Image: types.StringValue(in.Proxy.Image), DNS: listOrNull(ctx, in.Proxy.DNS), AllowPrivate: types.ListNull(types.StringType)}
		m.Proxy.Allow, d = types.ListValueFrom(ctx, types.StringType, orEmpty(in.Proxy.Allow))
		diags.Append(d...)
	}
	spec, ok := m.kubeSpec(ctx, diags)
	if !ok {
		return false
	}
	st, err := svc.Read(ctx, spec)
	if err != nil {
		addRuntimeError(diags, "ThreeGate Read Failed", "inspecting topology "+spec.Name+" on the cluster", err)
		return false
	}
	if st.Gone() {
		return true
	}
	m.setKubePlanned(spec)
	diags.Append(m.setKubeObserved(ctx, st)...)
	return false
}

func (r *threegateNetworkResource) kubeDelete(ctx context.Context, name string, diags *diag.Diagnostics) {
	svc := kubeTopologyService(ctx, r.data, diags)
	if svc == nil {
		return
	}
	if err := svc.Teardown(ctx, name); err != nil {
		addRuntimeError(diags, "ThreeGate Destroy Failed", "removing the proxy and policies of "+name+" from the cluster", err)
	}
}
