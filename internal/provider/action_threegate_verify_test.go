package provider

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// verifyTrigger is a threegate_verify action probing the fixture's
// topology, run after terraform_data.verify (which follows the topology's
// firewall setting, given as step) is created or changes.
func verifyTrigger(f *tgFixture, hostPort int, step string) string {
	return fmt.Sprintf(`
action "threegate_verify" "check" {
  provider = meepa
  config {
    name            = threegate_network.test.name
    allowed_target  = %q
    denied_target   = %q
    outside_address = %q
    host_port       = %d
  }
}

resource "terraform_data" "verify" {
  input      = [threegate_network.test.name, %q]
  depends_on = [threegate_network.test]
  lifecycle {
    action_trigger {
      events  = [after_create, after_update]
      actions = [action.threegate_verify.check]
    }
  }
}
`, f.outside.Addr(443), f.outside.Addr(8443), f.outside.Addr(8443), hostPort, step)
}

// TestAccThreegateVerifyAction: an apply that makes a topology runs the
// verification after it and passes; the same topology with its firewall
// disabled opens the host behind the bridge gateway, and the apply fails
// with that row (and only the failing rows); a bad target fails at plan;
// a topology that is not there fails naming name.
func TestAccThreegateVerifyAction(t *testing.T) {
	testutil.RequireDocker(t)
	f := newTGFixture(t)
	hostPort := testutil.HostService(t)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   needsActions,
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             f.checkDestroyed(t),
		Steps: []resource.TestStep{
			{
				Config: f.config(verifyTrigger(f, hostPort, "firewall on")),
			},
			{
				Config: f.configInner("  firewall = { enabled = false }", verifyTrigger(f, hostPort, "firewall off")),
				ExpectError: regexp.MustCompile(`(?s)Isolation Differs From The Spec.*probes failed.*` +
					`host via llmnet gateway\s+blocked\s+open\s+false`),
			},
			{
				Config: f.config(`
action "threegate_verify" "bad" {
  provider = meepa
  config {
    name           = threegate_network.test.name
    allowed_target = "no-port"
  }
}
`),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Invalid Probe Target`),
			},
			{
				// Back to a topology that isolates, so the last
				// configuration is a good one.
				Config: f.config(verifyTrigger(f, hostPort, "firewall on again")),
			},
		},
	})
}

// TestThreegateVerifyFailingRows: the action's error names only the rows
// that failed, and every violation.
func TestThreegateVerifyFailingRows(t *testing.T) {
	rep := topospec.Report{
		Probes: []topospec.Probe{
			{Role: "CORE", What: "proxy", Expected: "blocked", Observed: "timeout", Pass: true},
			{Role: "CORE", What: "host via llmnet gateway", Expected: "blocked", Observed: "open"},
		},
		Violations: []string{"container x on egressnet"},
	}
	bad := failingRows(rep)
	if len(bad.Probes) != 1 || bad.Probes[0].What != "host via llmnet gateway" || len(bad.Violations) != 1 {
		t.Fatalf("failingRows = %+v", bad)
	}
}
