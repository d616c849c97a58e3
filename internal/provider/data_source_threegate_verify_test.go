package provider

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccThreegateVerify runs the verification against a real topology:
// with the firewall every probe matches the spec; with it disabled, the
// host service behind the bridge gateways is reachable and the data source
// fails, naming the probes that differ.
func TestAccThreegateVerify(t *testing.T) {
	testutil.RequireDocker(t)
	f := newTGFixture(t)
	hostPort := testutil.HostService(t)
	verify := fmt.Sprintf(`
data "threegate_verify" "test" {
  provider        = meepa
  name            = threegate_network.test.name
  allowed_target  = %q
  denied_target   = %q
  outside_address = %q
  host_port       = %d
  depends_on      = [threegate_network.test]
}
`, f.outside.Addr(443), f.outside.Addr(8443), f.outside.Addr(8443), hostPort)
	ds := "data.threegate_verify.test"
	row := func(i int, role, what, observed string) statecheck.StateCheck {
		return statecheck.ExpectKnownValue(ds, tfjsonpath.New("probes").AtSliceIndex(i), knownvalue.ObjectPartial(map[string]knownvalue.Check{
			"role": knownvalue.StringExact(role), "what": knownvalue.StringExact(what),
			"observed": knownvalue.StringExact(observed), "pass": knownvalue.Bool(true),
		}))
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             f.checkDestroyed(t),
		Steps: []resource.TestStep{
			{
				Config: f.config(verify),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("passed"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("violations"), knownvalue.ListSizeExact(0)),
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("probes"), knownvalue.ListSizeExact(23)),
					row(0, "CORE", "proxy", "timeout"),
					row(1, "CORE", "host via llmnet gateway", "timeout"),
					row(3, "CORE", "allowed host directly", "timeout"),
					row(4, "CORE", "DNS outside name", "not-resolved"),
					row(5, "CORE", "DNS topology name", "resolved"),
					row(7, "FETCH", "allowed host via proxy", "allowed"),
					row(8, "FETCH", "proxy, no credential", "auth-required"),
					row(9, "FETCH", "allowed host directly", "timeout"),
					row(10, "FETCH", "disallowed host via proxy", "denied"),
					row(14, "FETCH", "DNS outside name", "not-resolved"),
					row(15, "FETCH", "DNS topology name", "resolved"),
					row(18, "TOOL_EXEC", "DNS outside name", "not-resolved"),
					row(19, "TOOL_EXEC", "DNS topology name", "resolved"),
					row(22, "TOOL_EXEC/sandbox", "DNS outside name", "not-resolved"),
				},
			},
			{
				Config: f.configInner("  firewall = { enabled = false }", verify),
				// Same topology with the firewall disabled: the gateway
				// path to the host service opens and verification fails.
				ExpectError: regexp.MustCompile(`(?s)Isolation Differs From The Spec.*host via llmnet gateway\s+blocked\s+open\s+false`),
			},
		},
	})
}

// TestThreegateVerifyTargetValidators: probe targets are refused at plan
// time unless they are what the probe dials (a port that would wrap around
// uint16, a name where no resolution may happen).
func TestThreegateVerifyTargetValidators(t *testing.T) {
	cases := []struct {
		v       validator.String
		in      string
		wantErr bool
	}{
		{hostPort(), "api.example.com:443", false},
		{hostPort(), "192.0.2.10:8443", false},
		{hostPort(), "[2001:db8::1]:443", false},
		{hostPort(), "api.example.com", true},
		{hostPort(), ":443", true},
		{hostPort(), "api.example.com:0", true},
		{hostPort(), "api.example.com:70000", true},
		{hostPort(), "api.example.com:https", true},
		{ipPort(), "192.0.2.10:443", false},
		{ipPort(), "[2001:db8::1]:443", false},
		{ipPort(), "example.com:443", true},
		{ipPort(), "192.0.2.10", true},
		{ipPort(), "192.0.2.10:0", true},
	}
	for _, c := range cases {
		var resp validator.StringResponse
		c.v.ValidateString(context.Background(), validator.StringRequest{
			Path: path.Root("target"), ConfigValue: types.StringValue(c.in),
		}, &resp)
		if got := resp.Diagnostics.HasError(); got != c.wantErr {
			t.Errorf("%s %q: error = %v, want %v (%v)", c.v.Description(context.Background()), c.in, got, c.wantErr, resp.Diagnostics)
		}
	}
}

// TestAccThreegateVerify_notFound: a topology that does not exist is an
// error on name that says how to order the read after the topology.
func TestAccThreegateVerify_notFound(t *testing.T) {
	testutil.RequireDocker(t)
	t.Setenv("TF_ACC_PROVIDER_NAMESPACE", "bogpad")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: `
terraform {
  required_providers {
    meepa = { source = "bogpad/meepa" }
  }
}

data "threegate_verify" "none" {
  provider = meepa
  name     = "tf-acc-tg-none-` + runID + `"
}
`,
			ExpectError: regexp.MustCompile(`(?s)ThreeGate Topology Not Found.*tf-acc-tg-none-` + runID + `.*depends_on`),
		}},
	})
}
