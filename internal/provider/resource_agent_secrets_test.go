package provider

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
)

// TestAgent_secretsStayOutOfToolsByDefault: an agent that says nothing
// about inject_secrets_env plans it false, and its secrets' names are then
// not environment variable names to check; asking for the export brings
// the check back. Plan only: no daemon is asked.
func TestAgent_secretsStayOutOfToolsByDefault(t *testing.T) {
	stateDir := t.TempDir()
	cfg := func(extra string) string {
		return fmt.Sprintf(`
provider "meepa" {
  state_dir   = %[1]q
  docker_host = "unix://%[1]s/no-daemon.sock"
}

resource "meepa_agent" "a" {
  agent_id = "tf-acc-secrets-default"
  llm      = { provider = "offline" }
  runner   = { deployment = "external", image = "unused:1" }
  secrets  = { "db-password" = "hunter2-db-pass" }
  %[2]s
}
`, stateDir, extra)
	}
	resource.UnitTest(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: cfg(""), PlanOnly: true, ExpectNonEmptyPlan: true,
			ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPreRefresh: []plancheck.PlanCheck{
				plancheck.ExpectKnownValue("meepa_agent.a", tfjsonpath.New("inject_secrets_env"), knownvalue.Bool(false)),
			}},
		}, {
			Config: cfg("inject_secrets_env = true"), PlanOnly: true,
			ExpectError: regexp.MustCompile(`Invalid Secret Name`),
		}},
	})
}
