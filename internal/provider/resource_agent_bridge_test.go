package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/network"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/bridge"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccAgent_bridgeNetwork: an agent whose tools have network, through
// terraform, the runner and the real daemon and iptables: a container-mode
// agent with network = "bridge", and a host-mode agent with the default
// file_access (allow_network = true), whose tools run in the runner
// container. Their messages reach an outside server and not the host's
// services or a link-local address (before, the container-mode agent's
// reached both on Docker's default bridge, and the host-mode agent's on
// meepa-runners). With the guard gone the plan is not empty (drift), and
// the next apply restores it.
func TestAccAgent_bridgeNetwork(t *testing.T) {
	testutil.RequireDocker(t)
	for name, mode := range map[string]string{
		"container mode": "enabled = true\n    network = \"bridge\"",
		"runsc":          "enabled = true\n    network = \"bridge\"\n    runtime = \"runsc\"",
		"host mode":      "enabled = false",
	} {
		t.Run(name, func(t *testing.T) {
			if strings.Contains(mode, "runsc") {
				testutil.RequireRuntime(t, testutil.Docker(t), "runsc")
			}
			testBridgeNetwork(t, mode)
		})
	}
}

func testBridgeNetwork(t *testing.T, mode string) {
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	hostPort := testutil.HostService(t)
	outside := testutil.StartOutside(t, 8443)
	metadata := testutil.StartLinkLocal(t, 8080)
	stateDir := t.TempDir()
	id := "tf-acc-agent-br-" + runID
	layout := deploy.LayoutFor(stateDir, id)
	cleanupAgent(t, cli, id)
	testutil.Cleanup(t, "remove the managed bridge", func() error {
		ctx := context.Background()
		err := guard.Remove(ctx, cli, sandbox.ManagedBridge)
		in, ierr := cli.NetworkInspect(ctx, sandbox.ManagedBridge, network.InspectOptions{})
		if ierr != nil {
			return errors.Join(err, testutil.Gone(ierr))
		}
		if p, perr := bridge.Params(in, nil); perr == nil {
			if h, herr := firewall.Open(ctx, nil); herr == nil {
				err = errors.Join(err, h.Remove(ctx, firewall.BuildBridge(p)))
			}
		}
		return errors.Join(err, testutil.Gone(cli.NetworkRemove(ctx, in.ID)))
	})
	config := fmt.Sprintf(`
provider "meepa" {
  state_dir = %q
}

resource "meepa_agent" "t" {
  agent_id = %q
  soul     = "You are a test agent."
  llm = { provider = "offline" }
  container_mode = {
    image   = %q
    %s
  }
}
`, stateDir, id, image, mode)
	probe := func(s *terraform.State) error {
		in, err := cli.NetworkInspect(context.Background(), sandbox.ManagedBridge, network.InspectOptions{})
		if err != nil {
			return fmt.Errorf("managed bridge after apply: %w", err)
		}
		gw := in.IPAM.Config[0].Gateway
		tok := s.RootModule().Resources["meepa_agent.t"].Primary.Attributes["token"]
		cmd := fmt.Sprintf("!sh echo out=$(nc -w 3 %s 8443 </dev/null); echo host=$(nc -w 3 %s %d </dev/null); echo md=$(nc -w 3 %s 8080 </dev/null)",
			outside.IP, gw, hostPort, strings.Split(metadata, ":")[0])
		reply, code, err := sendMessage(layout.Socket, tok, cmd)
		if err != nil || code != 200 {
			return fmt.Errorf("message: %d %v", code, err)
		}
		got := map[string]string{}
		for _, ln := range strings.Split(reply.Reply, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(ln), "="); ok {
				got[k] = v
			}
		}
		t.Logf("probes through the runner: %v", got)
		if got["out"] != "outside-8443" || got["host"] != "" || got["md"] != "" || len(got) != 3 {
			return fmt.Errorf("reply %q: want out=outside-8443 and empty host and md", reply.Reply)
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			{Config: config, Check: probe},
			{
				// Drift: the guard is gone; Read says so and the plan applies again.
				PreConfig: func() {
					if err := guard.Remove(context.Background(), cli, sandbox.ManagedBridge); err != nil {
						t.Fatal(err)
					}
				},
				Config:             config,
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{Config: config, Check: func(s *terraform.State) error {
				if d, err := bridge.Drift(context.Background(), cli, image, bridge.HostResolvers()); err != nil || len(d) > 0 {
					return fmt.Errorf("managed bridge after the second apply: %v %v", d, err)
				}
				return probe(s)
			}},
		},
	})
}
