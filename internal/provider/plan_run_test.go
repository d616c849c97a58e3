package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
)

// Two resources that are each valid alone but clash with each other are
// refused at plan, whichever Terraform plans first: two topologies whose
// subnets overlap, and a core agent asking an agent that this same
// configuration puts in another topology or gives the wrong role. Before,
// both passed plan and failed at apply after the first half was made.
func TestPlanRefusesClashesInOneRun(t *testing.T) {
	t.Setenv("TF_ACC_PROVIDER_NAMESPACE", "bogpad")
	topo := func(name, llm, fetch, egress string) string {
		return fmt.Sprintf(`
resource "threegate_network" %[1]q {
  provider         = meepa
  name             = %[1]q
  llmnet_subnet    = %[2]q
  fetchnet_subnet  = %[3]q
  egressnet_subnet = %[4]q
  proxy = {
    image = "img:1"
    allow = []
  }
}
`, name, llm, fetch, egress)
	}
	agent := func(id, network, role, ask string) string {
		return fmt.Sprintf(`
resource "meepa_agent" %[1]q {
  agent_id       = %[1]q
  llm            = { provider = "offline" }
  container_mode = { enabled = true, image = "img:1" }
  threegate = {
    network = %[2]q
    role    = %[3]q
    %[4]s
  }
}
`, id, network, role, ask)
	}
	head := fmt.Sprintf(`
terraform {
  required_providers {
    meepa = { source = "bogpad/meepa" }
  }
}

provider "meepa" {
  state_dir = %q
}
`, t.TempDir())
	for _, tc := range []struct{ name, cfg, want string }{
		{"overlapping topologies",
			topo("tg-one", "10.213.10.0/24", "10.213.11.0/24", "10.213.12.0/24") + topo("tg-two", "10.213.20.0/24", "10.213.11.128/25", "10.213.22.0/24"),
			`Subnet Overlaps Another Topology[\s\S]*fetchnet subnet 10.213.11.[0-9]+/2[45] overlaps the fetchnet subnet`},
		{"ask into another topology",
			agent("tf-core", "tg-a", "core", `ask = ["tf-te"]`) + agent("tf-te", "tg-b", "tool_exec", ""),
			`ThreeGate Ask Target Invalid[\s\S]*not in the threegate_network "tg-a"`},
		{"ask a core agent",
			agent("tf-core", "tg-a", "core", `ask = ["tf-core-2"]`) + agent("tf-core-2", "tg-a", "core", ""),
			`ThreeGate Ask Target Invalid[\s\S]*asks only fetch and tool_exec agents`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resource.UnitTest(t, resource.TestCase{
				TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
				ProtoV6ProviderFactories: testAccProviders,
				Steps: []resource.TestStep{{
					Config: head + tc.cfg, PlanOnly: true,
					ExpectError: regexp.MustCompile(strings.ReplaceAll(tc.want, " ", `\s+`)),
				}},
			})
		})
	}
	// Targets of the right role in the same topology plan cleanly, though
	// none is deployed yet: apply waits for them.
	resource.UnitTest(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: head + agent("tf-core", "tg-a", "core", `ask = ["tf-te", "tf-fetch"]`) + agent("tf-te", "tg-a", "tool_exec", "") +
				agent("tf-fetch", "tg-a", "fetch", ""),
			PlanOnly: true, ExpectNonEmptyPlan: true,
		}},
	})
}
