package provider

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// Destroy always works, whatever the plan's checks say of the
// configuration. Two ways in: a second topology whose subnet is known only
// at apply and overlaps the first's (apply fails on it after the first is
// made), and a host route planted after apply that overlaps the topology
// (the plan's live check now refuses its configuration). The test's own
// destroy must remove everything in both.
func TestAccThreegateNetwork_destroyAfterFailures(t *testing.T) {
	testutil.RequireDocker(t)
	t.Run("failed apply", func(t *testing.T) {
		f := newTGFixture(t)
		second := fmt.Sprintf(`
resource "terraform_data" "late" {
  input = "x"
}

resource "threegate_network" "second" {
  provider         = meepa
  name             = %q
  llmnet_subnet    = replace(terraform_data.late.id, "/.*/", %q)
  fetchnet_subnet  = "10.214.1.0/24"
  egressnet_subnet = "10.214.2.0/24"
  proxy = {
    image = %q
    allow = []
  }
}
`, f.name+"-b", f.llm, f.image)
		resource.Test(t, resource.TestCase{
			PreCheck:                 func() { testAccPreCheck(t) },
			ProtoV6ProviderFactories: testAccProviders,
			CheckDestroy:             f.checkDestroyed(t),
			Steps:                    []resource.TestStep{{Config: f.config(second), ExpectError: regexp.MustCompile(`overlaps`)}},
		})
	})
	t.Run("plan check fails", func(t *testing.T) {
		f := newTGFixture(t)
		half := strings.Replace(f.llm, ".0/24", ".0/25", 1)
		t.Cleanup(func() { _ = exec.Command("ip", "route", "del", half, "dev", "lo").Run() })
		resource.Test(t, resource.TestCase{
			PreCheck:                 func() { testAccPreCheck(t) },
			ProtoV6ProviderFactories: testAccProviders,
			CheckDestroy:             f.checkDestroyed(t),
			Steps: []resource.TestStep{
				{Config: f.config("")},
				{PreConfig: func() {
					if out, err := exec.Command("ip", "route", "add", half, "dev", "lo").CombinedOutput(); err != nil {
						t.Fatalf("ip route add %s: %v %s", half, err, out)
					}
				}, Config: f.config(""), PlanOnly: true, ExpectError: regexp.MustCompile(`Subnet Overlaps A Host Route`)},
			},
		})
	})
}
