package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccAgent_fleetOneApply: a core agent and the agents it asks, with no
// reference between them (as examples/fleet's for_each has them), come up
// in one apply, and the core agent's asks work. Before, the core agent's
// apply failed ("not deployed yet") whenever Terraform applied it before
// the agents it asks, and only a second apply got it.
func TestAccAgent_fleetOneApply(t *testing.T) {
	testutil.RequireDocker(t)
	t.Setenv("TF_ACC_PROVIDER_NAMESPACE", "bogpad")
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	stateDir := t.TempDir()
	tg, llm, fetch, egress, _ := freeTopology(t, cli)
	prefix := "tf-acc-fleet-" + runID
	for _, k := range []string{"web", "exec", "lead"} {
		cleanupAgent(t, cli, prefix+"-"+k)
	}
	// The fleet's core agent, and the agents it asks, which nothing in the
	// configuration makes it wait for. To have the core agent applied first
	// every time, the agents it asks wait for a 5 s provisioner; the
	// for_each of examples/fleet gives the same race without the sleep (and
	// terraform-plugin-testing, which reads state through a shim, knows no
	// for_each keys).
	fleet := fmt.Sprintf(`
resource "meepa_agent" "lead" {
  agent_id = "%[1]s-lead"
  llm      = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = %[2]q
  }
  threegate = {
    network = threegate_network.tg.id
    role    = "core"
    ask     = ["%[1]s-exec", "%[1]s-web"]
  }
  force_destroy_workspace = true
}

resource "terraform_data" "later" {
  provisioner "local-exec" {
    command = "sleep 5"
  }
}

locals {
  asked = [{ key = "exec", role = "tool_exec" }, { key = "web", role = "fetch" }]
}

resource "meepa_agent" "asked" {
  count      = length(local.asked)
  depends_on = [terraform_data.later]
  agent_id   = "%[1]s-${local.asked[count.index].key}"
  llm        = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = %[2]q
  }
  threegate = {
    network = threegate_network.tg.id
    role    = local.asked[count.index].role
  }
  force_destroy_workspace = true
}
`, prefix, image)
	ask := func(*terraform.State) error {
		lead := prefix + "-lead"
		c, err := agentspec.LoadConfig(deploy.LayoutFor(stateDir, lead).ConfigFile)
		if err != nil {
			return err
		}
		r, code, err := sendMessage(deploy.LayoutFor(stateDir, lead).Socket, c.Token, "!ask "+prefix+"-exec !sh echo $((6*7))")
		if err != nil || code != 200 || !strings.Contains(r.Reply, "exit 0\n42") {
			return fmt.Errorf("lead asks exec: %d %v %q", code, err, r.Reply)
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			// The fleet, its core agent asking the others, in one apply.
			{Config: topologyHCL(stateDir, tg, image, llm, fetch, egress) + fleet, Check: ask},
		},
	})
}
