package provider

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// TestThreegateNetwork_remoteDaemonRefusedAtPlan: with docker_host on
// another machine the host firewall would be written into this machine's
// iptables while the containers run there unprotected, so the plan fails on
// firewall.enabled, saying why and what to do. No daemon is needed: the
// address is never dialled.
func TestThreegateNetwork_remoteDaemonRefusedAtPlan(t *testing.T) {
	t.Setenv("TF_ACC_PROVIDER_NAMESPACE", "bogpad")
	cfg := `
terraform {
  required_providers {
    meepa = { source = "bogpad/meepa" }
  }
}

provider "meepa" {
  docker_host = "tcp://192.0.2.10:2376"
}

resource "threegate_network" "remote" {
  provider = meepa
  name     = "tf-unit-tg-remote"
  proxy = {
    image = "img:1"
    allow = ["example.com"]
  }
}
`
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config:   cfg,
			PlanOnly: true,
			ExpectError: regexp.MustCompile(`(?s)Host Firewall Needs A Local Docker Daemon.*` +
				`tcp://192\.0\.2\.10:2376.*another\s+machine.*Run terraform on the Docker\s+host.*firewall = \{ enabled\s+=\s+false \}`),
		}},
	})
}
