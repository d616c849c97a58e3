// A test ThreeGate topology (free name and subnets, an outside host), its
// configuration and the checks on the networks and rules it makes.

package provider

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// tgFixture is one test topology: a unique name and free subnets.
type tgFixture struct {
	name               string
	llm, fetch, egress string // CIDRs
	image              string
	outside            *testutil.Outside
	allow              []string
	proxyIP, egressIP  string
	foreign            bool // foreign rules were planted; CheckDestroy expects them kept
}

func newTGFixture(t *testing.T) *tgFixture {
	t.Helper()
	// The reattached provider must answer to the address the configuration
	// names (bogpad/meepa), not the default hashicorp/meepa.
	t.Setenv("TF_ACC_PROVIDER_NAMESPACE", "bogpad")
	cli := testutil.Docker(t)
	// Leftovers of crashed runs (an hour old: never a concurrent run's).
	if swept, err := testutil.SweepTopologies(context.Background(), cli, topology.LabelTopology, "tf-acc-tg-", time.Hour,
		topology.NewService(cli, nil).Teardown); err != nil || len(swept) > 0 {
		t.Logf("swept stale test topologies %v (err %v)", swept, err)
	}
	f := &tgFixture{image: testutil.EnsureRunnerImage(t, cli)}
	var s topospec.Spec
	f.name, f.llm, f.fetch, f.egress, s = freeTopology(t, cli)
	f.proxyIP, f.egressIP = s.Docker.ProxyIP.String(), s.Docker.EgressIP.String()
	f.outside = testutil.StartOutside(t, 443, 8443)
	f.allow = []string{f.outside.Addr(443)}
	return f
}

// freeTopology picks a random tf-acc-tg- name (swept by the tests when
// stale) and three /24s no network or route on this host uses, so that
// concurrent runs on one daemon never share a topology.
func freeTopology(t *testing.T, cli client.APIClient) (name, llm, fetch, egress string, spec topospec.Spec) {
	t.Helper()
	for try := 0; try < 30; try++ {
		a := 3 * rand.IntN(80)
		name = fmt.Sprintf("tf-acc-tg-%04x", rand.IntN(0xffff))
		llm, fetch, egress = fmt.Sprintf("10.213.%d.0/24", a), fmt.Sprintf("10.213.%d.0/24", a+1), fmt.Sprintf("10.213.%d.0/24", a+2)
		s, ps := topology.Build(topospec.Input{Name: name, Proxy: topospec.ProxyInput{Image: "x"},
			Docker: topospec.DockerInput{Subnets: map[string]string{topospec.LLMNet: llm, topospec.FetchNet: fetch, topospec.EgressNet: egress}}})
		if len(ps) > 0 {
			t.Fatal(ps)
		}
		c, err := topology.Conflicts(context.Background(), cli, s, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(c) == 0 {
			return name, llm, fetch, egress, s
		}
	}
	t.Fatal("no free subnets in 10.213.0.0/16")
	return
}

func (f *tgFixture) config(extra string, moreAllow ...string) string {
	return f.configInner("", extra, moreAllow...)
}

// configInner adds inner inside the resource block and extra after it.
func (f *tgFixture) configInner(inner, extra string, moreAllow ...string) string {
	allow := append(append([]string{}, f.allow...), moreAllow...)
	q := make([]string, len(allow))
	for i, a := range allow {
		q[i] = fmt.Sprintf("%q", a)
	}
	return fmt.Sprintf(`
terraform {
  required_providers {
    meepa = { source = "bogpad/meepa" }
  }
}

provider "meepa" {}

resource "threegate_network" "test" {
  provider         = meepa
  name             = %q
  llmnet_subnet    = %q
  fetchnet_subnet  = %q
  egressnet_subnet = %q
  proxy = {
    image         = %q
    allow         = [%s]
    allow_private = [%q]
  }
%s
}
%s`, f.name, f.llm, f.fetch, f.egress, f.image, strings.Join(q, ", "), f.outside.Prefix, inner, extra)
}

func (f *tgFixture) spec(t *testing.T) topospec.Spec {
	t.Helper()
	s, ps := topology.Build(topospec.Input{Name: f.name,
		Proxy: topospec.ProxyInput{Image: f.image, Allow: f.allow},
		Docker: topospec.DockerInput{Subnets: map[string]string{topospec.LLMNet: f.llm, topospec.FetchNet: f.fetch, topospec.EgressNet: f.egress},
			AllowPrivate: []string{f.outside.Prefix}, Firewall: &topospec.Firewall{Enabled: true}}})
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	return s
}

func iptablesS(chain string) (string, error) {
	out, err := exec.Command("iptables", "-S", chain).CombinedOutput()
	return string(out), err
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

// checkLive asks Docker and iptables whether the topology is what the spec
// says: networks with the right flags, subnets and labels; the proxy
// running, hardened, at its pinned addresses; the rules in place and in
// order, with the jump before DOCKER-USER's RETURN.
func (f *tgFixture) checkLive(t *testing.T) resource.TestCheckFunc {
	return func(*terraform.State) error {
		ctx := context.Background()
		cli := testutil.Docker(t)
		s := f.spec(t)
		for _, n := range s.Docker.Networks {
			in, err := cli.NetworkInspect(ctx, n.Name, network.InspectOptions{})
			if err != nil {
				return fmt.Errorf("network %s: %w", n.Name, err)
			}
			if in.Internal != n.Internal || len(in.IPAM.Config) != 1 || in.IPAM.Config[0].Subnet != n.Subnet.String() ||
				in.Labels[topology.LabelTopology] != f.name || in.Labels["io.meepa.managed-by"] != "terraform-provider-meepa" {
				return fmt.Errorf("network %s: internal=%t ipam=%+v labels=%v", n.Name, in.Internal, in.IPAM.Config, in.Labels)
			}
		}
		c, err := cli.ContainerInspect(ctx, topospec.ProxyName(s.Name))
		if err != nil {
			return err
		}
		hc := c.HostConfig
		if !c.State.Running || !hc.ReadonlyRootfs || len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL" ||
			hc.Memory == 0 || hc.PidsLimit == nil || hc.RestartPolicy.Name != "unless-stopped" || c.Config.User == "" ||
			!strings.Contains(strings.Join(hc.SecurityOpt, ","), "no-new-privileges") {
			return fmt.Errorf("proxy not running hardened: running=%t hostconfig=%+v user=%q", c.State.Running, hc, c.Config.User)
		}
		ips := map[string]string{}
		for n, ep := range c.NetworkSettings.Networks {
			ips[n] = ep.IPAddress
		}
		if len(ips) != 2 || ips[s.Network(topospec.FetchNet).Name] != f.proxyIP || ips[s.Network(topospec.EgressNet).Name] != f.egressIP {
			return fmt.Errorf("proxy addresses %v, want %s on fetchnet and %s on egressnet only", ips, f.proxyIP, f.egressIP)
		}
		set := topology.Rules(s)
		for _, ch := range set.Chains {
			live, err := iptablesS(ch)
			if err != nil {
				return fmt.Errorf("iptables -S %s: %v %s", ch, err, live)
			}
			var want []string
			want = append(want, "-N "+ch)
			for _, r := range set.Rules {
				if r.Chain == ch {
					want = append(want, r.Line())
				}
			}
			if strings.TrimSpace(live) != strings.Join(want, "\n") {
				return fmt.Errorf("chain %s:\n%s\nwant:\n%s", ch, live, strings.Join(want, "\n"))
			}
		}
		du, _ := iptablesS(firewall.DockerUser)
		jump, ret := strings.Index(du, set.Jumps[0].Line()), strings.Index(du, "-A DOCKER-USER -j RETURN")
		if jump < 0 || (ret >= 0 && ret < jump) {
			return fmt.Errorf("jump to %s missing or below RETURN:\n%s", firewall.ForwardChain(f.name), du)
		}
		in, _ := iptablesS(firewall.Input)
		if !strings.Contains(in, set.Jumps[1].Line()) {
			return fmt.Errorf("INPUT has no jump to %s:\n%s", firewall.InputChain(f.name), in)
		}
		return nil
	}
}

// checkDestroyed asks Docker and iptables that nothing of the topology is
// left.
func (f *tgFixture) checkDestroyed(t *testing.T) func(*terraform.State) error {
	return func(*terraform.State) error {
		ctx := context.Background()
		cli := testutil.Docker(t)
		nets, err := cli.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", topology.LabelTopology+"="+f.name))})
		if err != nil {
			return err
		}
		if len(nets) > 0 {
			return fmt.Errorf("%d networks of %s left", len(nets), f.name)
		}
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", topology.LabelTopology+"="+f.name))})
		if err != nil {
			return err
		}
		if len(cs) > 0 {
			return fmt.Errorf("%d containers of %s left", len(cs), f.name)
		}
		all, err := exec.Command("iptables", "-S").CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables -S: %v", err)
		}
		if strings.Contains(string(all), firewall.Comment(f.name)+`"`) || strings.Contains(string(all), firewall.ForwardChain(f.name)+" ") {
			return fmt.Errorf("rules of %s left:\n%s", f.name, all)
		}
		// Nothing else went: the foreign rules planted before destroy and
		// Docker's own RETURN are still there.
		keep := []string{"-A DOCKER-USER -j RETURN"}
		if f.foreign {
			keep = append(keep, f.foreignLines()...)
		}
		for _, l := range keep {
			if !strings.Contains(string(all), l+"\n") {
				return fmt.Errorf("destroy removed a rule it does not own: %q is gone:\n%s", l, all)
			}
		}
		return nil
	}
}

// foreignRules are rules of someone else in the parents of our jumps, as
// iptables arguments; destroy must leave them alone.
func (f *tgFixture) foreignRules() [][]string {
	c := "tf-acc-foreign-" + f.name
	return [][]string{
		{firewall.DockerUser, "-s", "192.0.2.1/32", "-m", "comment", "--comment", c, "-j", "RETURN"},
		{firewall.Input, "-s", "192.0.2.1/32", "-m", "comment", "--comment", c, "-j", "RETURN"},
	}
}

// foreignLines are foreignRules as iptables -S prints them.
func (f *tgFixture) foreignLines() []string {
	var out []string
	for _, r := range f.foreignRules() {
		out = append(out, "-A "+strings.Join(r, " "))
	}
	return out
}

// plantForeignRules inserts foreignRules at the top of their chains and
// deletes them at the end of the test.
func (f *tgFixture) plantForeignRules(t *testing.T) {
	f.foreign = true
	for _, r := range f.foreignRules() {
		mustRun(t, "iptables", append([]string{"-w", "10", "-I"}, r...)...)
		// Foreign rules survive every apply and destroy, so each is still
		// there to delete; one that is not was removed by the provider.
		testutil.Cleanup(t, "delete foreign rule", func() error {
			if out, err := exec.Command("iptables", append([]string{"-w", "10", "-D"}, r...)...).CombinedOutput(); err != nil {
				return fmt.Errorf("iptables -D %s: %w: %s", strings.Join(r, " "), err, out)
			}
			return nil
		})
	}
}

// topologyHCL is a test's root: the provider block with its state under
// stateDir and a threegate_network "tg" on the given subnets, host
// firewall off, allowing example.com and allow.
func topologyHCL(stateDir, name, image, llm, fetch, egress string, allow ...string) string {
	q := `"example.com"`
	for _, a := range allow {
		q += fmt.Sprintf(", %q", a)
	}
	return fmt.Sprintf(`
terraform {
  required_providers {
    meepa = { source = "bogpad/meepa" }
  }
}

provider "meepa" {
  state_dir = %q
}

resource "threegate_network" "tg" {
  provider         = meepa
  name             = %q
  llmnet_subnet    = %q
  fetchnet_subnet  = %q
  egressnet_subnet = %q
  firewall = { enabled = false }
  proxy = {
    image = %q
    allow = [%s]
  }
}
`, stateDir, name, llm, fetch, egress, image, q)
}
