package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// planModel is a configuration as Terraform would send it: unset optional
// attributes null, computed ones null.
func planModel(allow []string, firewallOn bool) threegateNetworkModel {
	var av []attr.Value
	for _, a := range allow {
		av = append(av, types.StringValue(a))
	}
	return threegateNetworkModel{
		ID: types.StringNull(), Name: types.StringValue("tg"),
		LLMNetSubnet: types.StringValue("10.213.1.0/24"), FetchNetSubnet: types.StringValue("10.213.2.0/24"),
		EgressNetSubnet: types.StringValue("10.213.3.0/24"), LLMNetGateway: types.StringNull(),
		FetchNetGateway: types.StringNull(), EgressNetGateway: types.StringNull(),
		Proxy: &proxyModel{Image: types.StringValue("img"), Allow: types.ListValueMust(types.StringType, av),
			AllowPrivate: types.ListNull(types.StringType), IP: types.StringNull(), EgressIP: types.StringNull(),
			Port: types.Int64Null(), DNS: types.ListNull(types.StringType)},
		Firewall:         &firewallModel{Enabled: types.BoolValue(firewallOn), LogDenied: types.BoolValue(false)},
		Networks:         types.MapNull(networkObjectType),
		ProxyURL:         types.StringNull(),
		ProxyContainerID: types.StringNull(),
		FirewallRules:    types.ListNull(types.StringType),
		IptablesRestore:  types.StringNull(),
		Roles:            types.MapNull(roleObjectType),
		Drift:            types.ListNull(types.StringType),
	}
}

func modifyPlan(t *testing.T, old, new threegateNetworkModel) diag.Diagnostics {
	t.Helper()
	ctx := context.Background()
	r := &threegateNetworkResource{} // unconfigured: no daemon is asked
	var sr resource.SchemaResponse
	r.Schema(ctx, resource.SchemaRequest{}, &sr)
	raw := func(m threegateNetworkModel) tftypes.Value {
		st := tfsdk.State{Schema: sr.Schema, Raw: tftypes.NewValue(sr.Schema.Type().TerraformType(ctx), nil)}
		if d := st.Set(ctx, &m); d.HasError() {
			t.Fatal(d)
		}
		return st.Raw
	}
	req := resource.ModifyPlanRequest{
		Config: tfsdk.Config{Schema: sr.Schema, Raw: raw(new)},
		Plan:   tfsdk.Plan{Schema: sr.Schema, Raw: raw(new)},
		State:  tfsdk.State{Schema: sr.Schema, Raw: raw(old)},
	}
	resp := &resource.ModifyPlanResponse{Plan: req.Plan}
	r.ModifyPlan(ctx, req, resp)
	return resp.Diagnostics
}

func TestModifyPlanWarnsWhenConnectivityWidens(t *testing.T) {
	old := planModel([]string{"example.com:443"}, true)
	d := modifyPlan(t, old, planModel([]string{"example.com:443", "evil.example.net:22"}, false))
	if d.HasError() {
		t.Fatal(d)
	}
	if len(d.Warnings()) != 1 {
		t.Fatalf("want one warning, got %v", d)
	}
	w := d.Warnings()[0]
	if w.Summary() != "ThreeGate Connectivity Widens" ||
		!strings.Contains(w.Detail(), "evil.example.net:22") || !strings.Contains(w.Detail(), "host firewall will be removed") {
		t.Errorf("warning %q: %q", w.Summary(), w.Detail())
	}
	// Narrowing is not a warning.
	if d := modifyPlan(t, old, planModel(nil, true)); len(d) != 0 {
		t.Errorf("narrowing: %v", d)
	}
}
