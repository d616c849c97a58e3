package provider

import (
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
)

// TestAgent_listenOnTopologyRefused (issue 19, item 8): a TCP runner.listen
// for an agent whose runner joins only its ThreeGate networks used to fail
// at apply ("Runner Unhealthy") after creating things; Docker publishes no
// port from an internal network. The plan refuses it on runner.listen.
func TestAgent_listenOnTopologyRefused(t *testing.T) {
	stateDir := t.TempDir()
	for name, body := range map[string]string{
		"host mode": `threegate = { network = "n", role = "core" }
  runner = { listen = "127.0.0.1:18731" }`,
		// agentConfigWith puts the image into container_mode; llm replaces
		// its offline one.
		"container mode relaying": `container_mode = { enabled = true }
  threegate = { network = "n", role = "fetch" }
  runner = { listen = "localhost:18732" }`,
	} {
		t.Run(name, func(t *testing.T) {
			resource.UnitTest(t, resource.TestCase{
				TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
				ProtoV6ProviderFactories: testAccProviders,
				Steps: []resource.TestStep{{
					Config:      strings.Replace(agentConfigWith(stateDir, body), `provider = "offline"`, `provider = "openai", api_key = "k"`, strings.Count(name, "relaying")),
					PlanOnly:    true,
					ExpectError: errorOn("runner.listen", `Unreachable Listen Address(.|\n)*use a unix\s+socket`),
				}},
			})
		})
	}
}
