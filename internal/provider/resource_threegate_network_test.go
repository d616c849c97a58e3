package provider

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

func TestAccThreegateNetwork_lifecycle(t *testing.T) {
	testutil.RequireDocker(t)
	f := newTGFixture(t)
	s := f.spec(t)
	addr := "threegate_network.test"
	set := topology.Rules(s)
	expectUpdate := resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)}}
	var savedDockerUser []string

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             f.checkDestroyed(t),
		Steps: []resource.TestStep{
			{
				Config: f.config(""),
				Check:  f.checkLive(t),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("proxy_url"), knownvalue.StringExact("http://"+f.proxyIP+":3128")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("proxy").AtMapKey("egress_ip"), knownvalue.StringExact(f.egressIP)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("networks").AtMapKey("fetchnet").AtMapKey("internal"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("networks").AtMapKey("egressnet").AtMapKey("internal"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("roles").AtMapKey("FETCH").AtMapKey("env").AtMapKey("https_proxy"),
						knownvalue.StringExact("http://"+f.proxyIP+":3128")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("roles").AtMapKey("CORE").AtMapKey("networks"),
						knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact(f.name + "-llmnet")})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("firewall_rules"), knownvalue.ListSizeExact(len(set.Lines()))),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("drift"), knownvalue.ListSizeExact(0)),
				},
			},
			{
				// A second plan is empty.
				Config:           f.config(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				ResourceName:                         addr,
				ImportState:                          true,
				ImportStateId:                        f.name,
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "name",
			},
			{
				// Widening the allow list updates the proxy in place (a new
				// container) and keeps the networks.
				Config: f.config("", f.outside.IP+":8443"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectUnknownValue(addr, tfjsonpath.New("proxy_container_id")),
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("networks"), knownvalue.NotNull()),
				}},
				Check: resource.ComposeTestCheckFunc(f.checkLive(t), func(*terraform.State) error {
					c, err := testutil.Docker(t).ContainerInspect(context.Background(), topospec.ProxyName(s.Name))
					if err != nil {
						return err
					}
					if !strings.Contains(strings.Join(c.Config.Cmd, " "), "--allow "+f.outside.IP+":8443") {
						return fmt.Errorf("proxy command lacks the new entry: %v", c.Config.Cmd)
					}
					return nil
				}),
			},
			{
				PreConfig: func() {
					stopGuard(t, f.name) // else it restores the rules before the plan sees them
					r := set.Rules[4]
					mustRun(t, "iptables", append([]string{"-D", r.Chain}, r.Args()...)...)
				},
				Config: f.config("", f.outside.IP+":8443"), ConfigPlanChecks: expectUpdate, Check: f.checkLive(t),
			},
			{
				// What a firewalld reload does. Foreign rules of DOCKER-USER
				// (Docker's RETURN) are put back after the step.
				PreConfig: func() {
					stopGuard(t, f.name) // else it restores the rules before the plan sees them
					out, _ := iptablesS(firewall.DockerUser)
					for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
						if strings.HasPrefix(l, "-A ") && !strings.Contains(l, "threegate:") {
							savedDockerUser = append(savedDockerUser, l)
						}
					}
					mustRun(t, "iptables", "-F", firewall.DockerUser)
				},
				Config: f.config("", f.outside.IP+":8443"), ConfigPlanChecks: expectUpdate, Check: f.checkLive(t),
			},
			{
				PreConfig: func() {
					stopGuard(t, f.name) // else it restores the rules before the plan sees them
					out, _ := iptablesS(firewall.DockerUser)
					for _, l := range savedDockerUser {
						if !strings.Contains(out, l) {
							mustRun(t, "iptables", append([]string{"-A"}, strings.Fields(strings.TrimPrefix(l, "-A "))...)...)
						}
					}
					mustRun(t, "iptables", append([]string{"-D", firewall.DockerUser}, set.Jumps[0].Args()...)...)
				},
				Config: f.config("", f.outside.IP+":8443"), ConfigPlanChecks: expectUpdate, Check: f.checkLive(t),
			},
			{
				PreConfig: func() {
					if err := testutil.Docker(t).ContainerStop(context.Background(), topospec.ProxyName(s.Name), container.StopOptions{}); err != nil {
						t.Fatal(err)
					}
				},
				Config: f.config("", f.outside.IP+":8443"), ConfigPlanChecks: expectUpdate, Check: f.checkLive(t),
			},
			{
				PreConfig: func() {
					cli := testutil.Docker(t)
					n := s.Network(topospec.FetchNet).Name
					_ = cli.NetworkDisconnect(context.Background(), n, topospec.ProxyName(s.Name), true)
					if err := cli.NetworkRemove(context.Background(), n); err != nil {
						t.Fatal(err)
					}
				},
				Config: f.config("", f.outside.IP+":8443"), ConfigPlanChecks: expectUpdate, Check: f.checkLive(t),
			},
			{
				// Foreign rules above our jumps, in DOCKER-USER and INPUT,
				// are no drift; CheckDestroy then proves destroy keeps them.
				PreConfig: func() { f.plantForeignRules(t) },
				Config:    f.config("", f.outside.IP+":8443"), ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check: f.checkLive(t),
			},
		},
	})
}

// TestThreegateNetwork_badInput: every bad input is a plan-time error on its
// attribute. A unit test: planning a threegate_network needs no daemon.
func TestThreegateNetwork_badInput(t *testing.T) {
	t.Setenv("TF_ACC_PROVIDER_NAMESPACE", "bogpad")
	cfg := func(body string) string {
		return `
terraform {
  required_providers {
    meepa = { source = "bogpad/meepa" }
  }
}

resource "threegate_network" "bad" {
  provider = meepa
  name     = "tf-acc-tg-bad"
` + body + `
}
`
	}
	proxy := func(inner string) string {
		return "proxy = {\n image = \"img\"\n" + inner + "\n}\n"
	}
	ok := "allow = [\"example.com\"]"
	cases := []struct{ name, body, want string }{
		{"overlap", "llmnet_subnet = \"10.213.1.0/24\"\nfetchnet_subnet = \"10.213.1.0/25\"\n" + proxy(ok), `(?s)Overlapping Subnets.*fetchnet_subnet = "10.213.1.0/25"`},
		{"not a CIDR", "egressnet_subnet = \"10.213.300.0/24\"\n" + proxy(ok), `(?s)Invalid Subnet.*egressnet_subnet = "10.213.300.0/24"`},
		{"pinned ip outside", "fetchnet_subnet = \"10.213.2.0/24\"\n" + proxy(ok+"\nip = \"10.213.9.2\""), `(?s)Proxy Address Outside Subnet.*proxy.ip.*10.213.9.2 is not inside`},
		{"scheme", proxy("allow = [\"https://example.com\"]"), `(?s)Invalid Allow Pattern.*proxy.allow\[0\].*scheme`},
		{"path", proxy("allow = [\"example.com:443/x\"]"), `(?s)Invalid Allow Pattern.*proxy.allow\[0\].*path`},
		{"port 0", proxy("allow = [\"example.com:0\"]"), `(?s)Invalid Allow Pattern.*proxy.allow\[0\].*port 0`},
		{"port 70000", proxy("allow = [\"example.com:70000\"]"), `(?s)Invalid Allow Pattern.*proxy.allow\[0\].*70000`},
		{"proxy port 0", proxy(ok + "\nport = 0"), `(?s)Invalid Proxy Port.*proxy.port.*0 is not a TCP port`},
		{"proxy port 70000", proxy(ok + "\nport = 70000"), `(?s)Invalid Proxy Port.*proxy.port.*70000`},
		{"proxy image", "proxy = {\n image = \"Bad Image\"\n" + ok + "\n}\n", `(?s)Invalid Image Reference.*proxy.image`},
		{"upstream ca", proxy(ok + "\nupstream_ca = \"not a certificate\""), `(?s)Invalid Upstream CA.*proxy.upstream_ca.*PEM certificates`},
	}
	var steps []resource.TestStep
	for _, c := range cases {
		steps = append(steps, resource.TestStep{Config: cfg(c.body), PlanOnly: true, ExpectError: regexp.MustCompile(c.want)})
	}
	resource.UnitTest(t, resource.TestCase{ProtoV6ProviderFactories: testAccProviders, Steps: steps})
}

// TestAccThreegateNetwork_overlapAtPlan: overlap with a host route is known
// at plan time (ModifyPlan reads the routes), so plan fails on the attribute.
func TestAccThreegateNetwork_overlapAtPlan(t *testing.T) {
	testutil.RequireDocker(t)
	f := newTGFixture(t)
	f.llm = f.outside.Prefix
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: f.config(""), PlanOnly: true,
			ExpectError: regexp.MustCompile(`(?s)Subnet Overlaps A Host Route.*llmnet_subnet.*` + regexp.QuoteMeta(f.outside.Prefix)),
		}},
	})
}
