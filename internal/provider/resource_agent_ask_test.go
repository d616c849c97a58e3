package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// A core agent may ask only the fetch and tool_exec agents of its own
// topology: the plan refuses a deployed target of another topology, or of
// the wrong role, from the targets' runner files alone (no daemon).
func TestAgent_askRefusedAtPlan(t *testing.T) {
	stateDir := t.TempDir()
	deployed := func(id, topo, role string) {
		l := deploy.LayoutFor(stateDir, id)
		if _, err := deploy.Prepare(l); err != nil {
			t.Fatal(err)
		}
		c := &agentspec.Config{AgentID: id, Role: role, Listen: "unix://" + l.Socket, Token: "t",
			Workspace: stateDir + "/agents/" + id}
		c.LLM.Provider = "offline"
		c.Container.Enabled, c.Container.Image = true, "img:1"
		c.Container.Networks = []string{topology.NetworkName(topo, topospec.LLMNet)}
		if err := deploy.WriteConfig(l, c); err != nil {
			t.Fatal(err)
		}
	}
	deployed("tf-elsewhere-te", "other-tg", "tool_exec")
	deployed("tf-core-two", "my-tg", "core")
	for _, tc := range []struct {
		target string
		want   string
	}{
		{"tf-elsewhere-te", `not in the threegate_network "my-tg"`},
		{"tf-core-two", `asks only fetch and tool_exec agents; this one's role is "core"`},
	} {
		t.Run(tc.target, func(t *testing.T) {
			resource.UnitTest(t, resource.TestCase{
				TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
				ProtoV6ProviderFactories: testAccProviders,
				Steps: []resource.TestStep{{
					Config: fmt.Sprintf(`
provider "meepa" {
  state_dir = %q
}

resource "meepa_agent" "core" {
  agent_id       = "tf-core"
  llm            = { provider = "offline" }
  container_mode = { enabled = true, image = "img:1" }
  threegate = {
    network = "my-tg"
    role    = "core"
    ask     = [%q]
  }
}
`, stateDir, tc.target),
					PlanOnly: true,
					// Terraform wraps the detail: any space may be a newline.
					ExpectError: regexp.MustCompile(`ThreeGate Ask Target Invalid[\s\S]*` +
						strings.ReplaceAll(regexp.QuoteMeta(tc.want), " ", `\s+`)),
				}},
			})
		})
	}
}
