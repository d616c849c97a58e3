package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccAgent_threegate: two agents in a real ThreeGate topology, one
// FETCH and one CORE. Each one's message containers join exactly the role's
// networks (FETCH: llmnet and fetchnet, with the proxy env; CORE: llmnet
// only, with no proxy env at all); container_mode.network is null.
func TestAccAgent_threegate(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	stateDir := t.TempDir()
	tg, llm, fetch, egress, spec := freeTopology(t, cli)
	id := "tf-acc-agent-fetch" + "-" + runID
	coreID := "tf-acc-agent-core" + "-" + runID
	cleanupAgent(t, cli, id)
	cleanupAgent(t, cli, coreID)
	cfg := fmt.Sprintf(`
provider "meepa" {
  state_dir = %[1]q
}

resource "threegate_network" "tg" {
  provider         = meepa
  name             = %[2]q
  llmnet_subnet    = %[5]q
  fetchnet_subnet  = %[6]q
  egressnet_subnet = %[7]q
  # The host firewall is threegate_network's to test: its drift test
  # flushes DOCKER-USER, which would break this apply when runs overlap.
  firewall = { enabled = false }
  proxy = {
    image = %[3]q
    allow = ["example.com"]
  }
}

resource "meepa_agent" "fetch" {
  agent_id = %[4]q
  llm      = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = %[3]q
  }
  threegate = {
    network = threegate_network.tg.id
    role    = "fetch"
  }
}

resource "meepa_agent" "core" {
  agent_id = %[8]q
  llm      = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = %[3]q
  }
  threegate = {
    network = threegate_network.tg.id
    role    = "core"
  }
}
`, stateDir, tg, image, id, llm, fetch, egress, coreID)

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: cfg,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("meepa_agent.fetch", tfjsonpath.New("container_mode").AtMapKey("network"), knownvalue.Null()),
				statecheck.ExpectKnownValue("meepa_agent.fetch", tfjsonpath.New("runner_status"), knownvalue.StringExact("running")),
				statecheck.ExpectKnownValue("meepa_agent.core", tfjsonpath.New("container_mode").AtMapKey("network"), knownvalue.Null()),
				statecheck.ExpectKnownValue("meepa_agent.core", tfjsonpath.New("runner_status"), knownvalue.StringExact("running")),
			},
			Check: func(s *terraform.State) error {
				for _, agentID := range []string{id, coreID} {
					if err := withPrestarted(cli, agentID, func(ci container.InspectResponse) error {
						// The engine's resolver forwards names it does not
						// know only to the topology's DNS sink.
						if got := strings.Join(ci.HostConfig.DNS, ","); got != topology.DNSSink(spec).String() ||
							strings.Join(ci.HostConfig.DNSSearch, ",") != "." {
							return fmt.Errorf("message container DNS %q search %q, want the sink %s and no search domain",
								got, ci.HostConfig.DNSSearch, topology.DNSSink(spec))
						}
						return nil
					}); err != nil {
						return fmt.Errorf("%s: %w", agentID, err)
					}
				}
				if err := checkRoleContainer(cli, s, stateDir, "meepa_agent.fetch", id, []string{tg + "-fetchnet", tg + "-llmnet"}, true); err != nil {
					return fmt.Errorf("fetch: %w", err)
				}
				if err := checkRoleContainer(cli, s, stateDir, "meepa_agent.core", coreID, []string{tg + "-llmnet"}, false); err != nil {
					return fmt.Errorf("core: %w", err)
				}
				return nil
			},
		}, {
			// The agents' second plan is empty. (The topology's host
			// firewall is shared with every other test on this host; its
			// own drift is threegate_network's tests' business.)
			Config: cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meepa_agent.fetch", plancheck.ResourceActionNoop),
					plancheck.ExpectResourceAction("meepa_agent.core", plancheck.ResourceActionNoop),
				},
			},
		}},
	})
}

// checkRoleContainer sends the agent at addr (state dir stateDir, id id) a
// message, then reads the prestarted container waiting for the next one
// (made from the same spec; a FETCH agent has no shell to keep a message's
// container busy with): it must
// join exactly wantNets, mount the agent's workspace, and carry the FETCH
// proxy env when wantProxy, and no proxy variable at all otherwise.
func checkRoleContainer(cli client.APIClient, s *terraform.State, stateDir, addr, id string, wantNets []string, wantProxy bool) error {
	layout := deploy.LayoutFor(stateDir, id)
	tok := s.RootModule().Resources[addr].Primary.Attributes["token"]
	r, code, err := sendMessage(layout.Socket, tok, "hi")
	if err != nil || code != 200 || r.Reply != agent.OfflineAnswer("hi") {
		return fmt.Errorf("message: %d %v %+v", code, err, r)
	}
	return withPrestarted(cli, id, func(ci container.InspectResponse) error {
		var nets []string
		for n := range ci.NetworkSettings.Networks {
			nets = append(nets, n)
		}
		sort.Strings(nets)
		if strings.Join(nets, ",") != strings.Join(wantNets, ",") {
			return fmt.Errorf("networks %v, want exactly %v", nets, wantNets)
		}
		var proxyURLs, proxyVars int
		for _, e := range ci.Config.Env {
			name, _, _ := strings.Cut(e, "=")
			if strings.HasSuffix(strings.ToLower(name), "_proxy") {
				proxyVars++
			}
			if strings.HasPrefix(e, "http_proxy=http://") || strings.HasPrefix(e, "https_proxy=http://") {
				proxyURLs++
			}
		}
		if wantProxy && proxyURLs != 2 {
			return fmt.Errorf("proxy env missing: %v", ci.Config.Env)
		}
		if !wantProxy && proxyVars != 0 {
			return fmt.Errorf("proxy env in a role without the proxy: %v", ci.Config.Env)
		}
		// The workspace, and the runner's LLM relay directory read-only.
		ws := false
		for _, m := range ci.Mounts {
			ws = ws || (filepath.Base(m.Source) == id && m.Destination == sandbox.WorkspaceDir)
			if m.Destination != sandbox.WorkspaceDir && (m.Destination != sandbox.RelayMountDir || m.RW) {
				return fmt.Errorf("unexpected mount %+v", m)
			}
		}
		if !ws {
			return fmt.Errorf("mounts %+v", ci.Mounts)
		}
		return nil
	})
}

// TestAccAgent_threegateMissing: an agent placed in a topology that does
// not exist fails on the threegate attribute, naming the topology, before
// anything is made.
func TestAccAgent_threegateMissing(t *testing.T) {
	testutil.RequireDocker(t)
	stateDir := t.TempDir()
	missing := "tf-acc-tg-none-" + runID
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
provider "meepa" {
  state_dir = %q
}

resource "meepa_agent" "t" {
  agent_id       = "tf-acc-agent-tgmissing-%s"
  llm            = { provider = "offline" }
  container_mode = { enabled = true, image = "meepa-test/runner:latest" }
  threegate      = { network = %q, role = "core" }
}
`, stateDir, runID, missing),
			ExpectError: regexp.MustCompile(`(?s)ThreeGate Role Not Resolved.*topology "` + missing + `".*apply the threegate_network first`),
		}},
	})
	if entries, _ := os.ReadDir(filepath.Join(stateDir, "agents")); len(entries) != 0 {
		t.Fatalf("a workspace was made for an agent whose topology is missing: %v", entries)
	}
}

// withPrestarted waits for the agent's prestarted container (running,
// labelled message=prestart) and hands its inspection to check.
func withPrestarted(cli client.APIClient, id string, check func(container.InspectResponse) error) error {
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		list, err := cli.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(
			filters.Arg("label", sandbox.LabelAgent+"="+id),
			filters.Arg("label", sandbox.LabelMessage+"=prestart"),
		)})
		if err != nil || len(list) == 0 {
			continue
		}
		ci, err := cli.ContainerInspect(ctx, list[0].ID)
		if err != nil {
			continue
		}
		return check(ci)
	}
	return fmt.Errorf("no prestarted container of %s", id)
}
