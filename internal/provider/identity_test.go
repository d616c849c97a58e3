package provider

import (
	"fmt"
	"os"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// Identity needs Terraform 1.12: under an older CLI these tests skip,
// saying so (terraform-plugin-testing's version check).
var needsIdentity = []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_12_0)}

// TestAccIsolationImage_identity: the image's identity is its isolation
// tag; an import block by identity, and one by ID, give back the state.
func TestAccIsolationImage_identity(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	base := ensureBareBase(t, cli)
	tag := image.IsolatedTag("0.1.0-test", base)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   needsIdentity,
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			{
				Config: fmt.Sprintf("resource \"meepa_isolation_image\" \"test\" {\n  base_image = %q\n}\n", base),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectIdentity(imgAddr, map[string]knownvalue.Check{"isolated_image": knownvalue.StringExact(tag)}),
				},
			},
			{ResourceName: imgAddr, ImportState: true, ImportStateKind: resource.ImportBlockWithResourceIdentity},
			{ResourceName: imgAddr, ImportState: true, ImportStateKind: resource.ImportBlockWithID},
		},
	})
}

// TestAccThreegateNetwork_identity: a topology's identity is its name and
// its backend; it imports by identity, and an identity naming the other
// backend is refused on its attribute before anything is read.
func TestAccThreegateNetwork_identity(t *testing.T) {
	testutil.RequireDocker(t)
	if os.Getenv("TF_ACC_PROVIDER_HOST") == "registry.opentofu.org" {
		// Measured with OpenTofu 1.12.6: the import block the testing
		// framework writes for an identity import names no provider, and
		// OpenTofu takes the threegate_ type prefix for a provider
		// "threegate" it then looks up in its registry.
		t.Skip("OpenTofu 1.12 resolves the framework's identity import block of threegate_network to a provider named threegate")
	}
	f := newTGFixture(t)
	addr := "threegate_network.test"
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   needsIdentity,
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             f.checkDestroyed(t),
		Steps: []resource.TestStep{
			{
				Config: f.config(""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectIdentity(addr, map[string]knownvalue.Check{
						"name": knownvalue.StringExact(f.name), "backend": knownvalue.StringExact("docker"),
					}),
				},
			},
			{ResourceName: addr, ImportState: true, ImportStateKind: resource.ImportBlockWithResourceIdentity},
			{
				Config: f.config("") + fmt.Sprintf(`
import {
  to       = threegate_network.other
  identity = { name = %q, backend = "kubernetes" }
}
resource "threegate_network" "other" {
  provider = meepa
  name     = %q
  proxy    = { image = "x", allow = [] }
}
`, f.name, f.name),
				PlanOnly:    true,
				ExpectError: errRE(`Wrong Backend.*names a topology on kubernetes, and this provider is configured for docker`),
			},
		},
	})
}

// TestAccAgent_identity: an agent's identity is its id and its backend; it
// imports by identity (the write-only key and secrets aside, the state
// comes back), and an identity naming the other backend is refused on its
// attribute before anything is read.
func TestAccAgent_identity(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	stateDir := t.TempDir()
	id := "tf-acc-agent-ident-" + runID
	cleanupAgent(t, cli, id)
	config := agentAccConfig(stateDir, id, image, "512m", "")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   needsIdentity,
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectIdentity("meepa_agent.t", map[string]knownvalue.Check{
						"agent_id": knownvalue.StringExact(id), "backend": knownvalue.StringExact("docker"),
					}),
				},
			},
			{
				ResourceName: "meepa_agent.t", ImportState: true, ImportStateKind: resource.ImportBlockWithResourceIdentity,
				// Write-only: never in state, so never read back.
				ImportStateVerifyIgnore: []string{"llm.api_key", "secrets"},
			},
			{
				Config: config + fmt.Sprintf(`
import {
  to       = meepa_agent.other
  identity = { agent_id = %q, backend = "kubernetes" }
}
resource "meepa_agent" "other" {
  agent_id       = %q
  llm            = { provider = "offline" }
  container_mode = { enabled = true, image = %q }
}
`, id, id, image),
				PlanOnly:    true,
				ExpectError: errRE(`Wrong Backend.*names an agent on kubernetes, and this provider is configured for docker`),
			},
		},
	})
}
