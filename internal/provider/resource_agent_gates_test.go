package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// reachedRe finds a probe line of a wget that succeeded.
var reachedRe = regexp.MustCompile(`(?m)^== \S+ \S+ 0$`)

// TestAccAgent_threegateGates: the three gates of a real topology at the
// execution layer, driven through the offline provider. TOOL-EXEC's shell
// sees no interface but lo; FETCH has no shell and its fetch of a host off
// the allowlist gets the proxy's refusal; CORE has neither shell nor fetch
// and asks TOOL-EXEC and FETCH through the runners, getting their answers
// back as untrusted content.
func TestAccAgent_threegateGates(t *testing.T) { threegateGates(t, "") }

// The same gates with every agent's per-message containers under gVisor.
func TestAccAgent_threegateGatesRunsc(t *testing.T) { threegateGates(t, "runsc") }

func threegateGates(t *testing.T, runtime string) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	runtimeLine := ""
	if runtime != "" {
		testutil.RequireRuntime(t, cli, runtime)
		runtimeLine = fmt.Sprintf("runtime = %q", runtime)
	}
	image := testutil.EnsureRunnerImage(t, cli)
	stateDir := t.TempDir()
	tg, llm, fetch, egress, spec := freeTopology(t, cli)
	// An allowed web host outside: FETCH's fetch of it must bring its body.
	outside := testutil.StartOutside(t)
	outside.ServeHTTP(t, 443, "hello from the allowed host")
	fetchID, teID, coreID := "tf-acc-gate-fetch-"+runtime+runID, "tf-acc-gate-te-"+runtime+runID, "tf-acc-gate-core-"+runtime+runID
	for _, id := range []string{fetchID, teID, coreID} {
		cleanupAgent(t, cli, id)
	}
	agentHCL := func(name, id, role, extra string) string {
		return fmt.Sprintf(`
resource "meepa_agent" %[1]q {
  agent_id = %[2]q
  llm      = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = %[4]q
    %[6]s
  }
  threegate = {
    network = threegate_network.tg.id
    role    = %[3]q
    %[5]s
  }
}
`, name, id, role, image, extra, runtimeLine)
	}
	cfg := fmt.Sprintf(`
provider "meepa" {
  state_dir = %[1]q
}

resource "threegate_network" "tg" {
  provider         = meepa
  name             = %[2]q
  llmnet_subnet    = %[4]q
  fetchnet_subnet  = %[5]q
  egressnet_subnet = %[6]q
  firewall = { enabled = false }
  proxy = {
    image         = %[3]q
    allow         = ["example.com", %[7]q]
    allow_private = [%[8]q]
  }
}
`, stateDir, tg, image, llm, fetch, egress, outside.Addr(443), outside.Prefix) +
		agentHCL("fetch", fetchID, "fetch", "") +
		agentHCL("te", teID, "tool_exec", "") +
		agentHCL("core", coreID, "core", "ask = [meepa_agent.te.agent_id, meepa_agent.fetch.agent_id]")

	send := func(s *terraform.State, addr, id, text string) (string, error) {
		tok := s.RootModule().Resources[addr].Primary.Attributes["token"]
		r, code, err := sendMessage(deploy.LayoutFor(stateDir, id).Socket, tok, text)
		if err != nil || code != 200 {
			return "", fmt.Errorf("%s %q: %d %v %+v", addr, text, code, err, r)
		}
		return r.Reply, nil
	}
	expect := func(s *terraform.State, addr, id, text string, want ...string) error {
		reply, err := send(s, addr, id, text)
		if err != nil {
			return err
		}
		for _, w := range want {
			if !strings.Contains(reply, w) {
				return fmt.Errorf("%s %q: reply %q lacks %q", addr, text, reply, w)
			}
		}
		t.Logf("%s %q -> %q", addr, text, reply)
		return nil
	}
	ifaces := `!sh tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ','`
	// TOOL-EXEC's shell tries the llmnet gateway (a host service listens
	// there on all addresses) and the proxy; each try must find no route
	// at all, not a refusal that a reachable peer would also give.
	hostPort := testutil.HostService(t)
	llmGateway := spec.Network(topospec.LLMNet).Gateway
	reach := func(proxyURL string) string {
		proxy := strings.Replace(strings.TrimPrefix(proxyURL, "http://"), ":", " ", 1)
		return fmt.Sprintf(`!sh for a in "%s %d" "%s"; do nc -w 3 $a </dev/null 2>&1; echo "== $a $?"; done`, llmGateway, hostPort, proxy)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: cfg,
			Check: func(s *terraform.State) error {
				type check struct {
					addr, id, text string
					want           []string
				}
				checks := []check{
					{"meepa_agent.te", teID, ifaces, []string{"exit 0\nlo,"}},
					{"meepa_agent.fetch", fetchID, "!sh echo ran", []string{"not available to this FETCH agent"}},
					{"meepa_agent.fetch", fetchID, "!fetch http://blocked.example.net/", []string{"untrusted content", "HTTP 403"}},
					{"meepa_agent.fetch", fetchID, "!fetch http://" + outside.Addr(443) + "/", []string{"untrusted content", "hello from the allowed host"}},
					{"meepa_agent.core", coreID, "!sh echo ran", []string{"not available to this CORE agent"}},
					{"meepa_agent.core", coreID, "!fetch http://example.com/", []string{"not available to this CORE agent"}},
					{"meepa_agent.core", coreID, "!ask " + teID + " !sh echo $((6*7))", []string{"untrusted content from agent " + teID, "exit 0\n42"}},
					{"meepa_agent.core", coreID, "!ask " + teID + " " + ifaces, []string{"exit 0\nlo,"}},
					{"meepa_agent.core", coreID, "!ask " + fetchID + " !fetch http://blocked.example.net/", []string{"untrusted content from agent " + fetchID, "HTTP 403"}},
					{"meepa_agent.core", coreID, "!ask tf-acc-nobody hi", []string{"is not one this agent may ask"}},
				}
				if runtime == "runsc" {
					// Each role's messages really run on gVisor's kernel.
					checks = append(checks,
						check{"meepa_agent.te", teID, "!sh uname -r", []string{"-gvisor"}},
						check{"meepa_agent.core", coreID, "!ask " + teID + " !sh uname -r", []string{"-gvisor"}})
				}
				for _, c := range checks {
					if err := expect(s, c.addr, c.id, c.text, c.want...); err != nil {
						return err
					}
				}
				proxyURL := s.RootModule().Resources["threegate_network.tg"].Primary.Attributes["proxy_url"]
				reply, err := send(s, "meepa_agent.te", teID, reach(proxyURL))
				if err != nil {
					return err
				}
				if n := strings.Count(reply, "Network is unreachable"); n != 2 || reachedRe.MatchString(reply) {
					return fmt.Errorf("TOOL-EXEC reached the llmnet gateway or the proxy (want no route to both):\n%s", reply)
				}
				return nil
			},
		}},
	})
}
