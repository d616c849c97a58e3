package provider

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccAgent_hostMode: container mode off, so the runner container runs
// each message as a Landlock-restricted child. The allow_read path is
// mounted into the runner at the same path and readable, not writable;
// what is not allowed is not readable; the runner's Landlock ABI shows in
// landlock_abi. It listens on a loopback TCP port, published by the runner
// container on the host's 127.0.0.1 only.
func TestAccAgent_hostMode(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	stateDir := t.TempDir()
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "doc.txt"), []byte("readable doc"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := "tf-acc-agent-host" + "-" + runID
	port := freePort(t)
	t.Cleanup(func() { cleanupAgent(cli, id) })
	cfg := fmt.Sprintf(`
provider "meepa" {
  state_dir = %[1]q
}

resource "meepa_agent" "h" {
  agent_id = %[2]q
  llm      = { provider = "offline" }
  runner = {
    image  = %[3]q
    listen = "127.0.0.1:%[5]d"
  }
  file_access = {
    allow_read    = [%[4]q]
    allow_network = false
  }
}
`, stateDir, id, image, data, port)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: cfg,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("meepa_agent.h", tfjsonpath.New("runner_status"), knownvalue.StringExact("running")),
				statecheck.ExpectKnownValue("meepa_agent.h", tfjsonpath.New("landlock_abi"), knownvalue.NotNull()),
				statecheck.ExpectKnownValue("meepa_agent.h", tfjsonpath.New("endpoint"), knownvalue.StringExact(fmt.Sprintf("http://127.0.0.1:%d", port))),
			},
			Check: func(s *terraform.State) error {
				a := s.RootModule().Resources["meepa_agent.h"].Primary.Attributes
				if a["landlock_abi"] == "0" {
					return fmt.Errorf("landlock_abi 0: the runner container sees no Landlock")
				}
				// The runner runs with the Landlock-enabling seccomp profile,
				// never unconfined.
				ci, err := cli.ContainerInspect(context.Background(), deploy.ContainerName(id))
				if err != nil {
					return err
				}
				seccomp := ""
				for _, o := range ci.HostConfig.SecurityOpt {
					if strings.HasPrefix(o, "seccomp=") {
						seccomp = o
					}
				}
				if !strings.Contains(seccomp, "landlock_create_ruleset") || strings.Contains(seccomp, "unconfined") {
					return fmt.Errorf("runner seccomp option %.80q", seccomp)
				}
				tok := a["token"]
				probe := func(cmd string) (string, error) {
					r, code, err := sendTo(deploy.Listener{Port: port}, tok, "!sh "+cmd)
					if err != nil || code != 200 {
						return "", fmt.Errorf("%q: %d %v %+v", cmd, code, err, r)
					}
					return r.Reply, nil
				}
				out, err := probe("cat " + filepath.Join(data, "doc.txt"))
				if err != nil || !strings.Contains(out, "readable doc") {
					return fmt.Errorf("allow_read not readable: %q %v", out, err)
				}
				out, err = probe("echo x > " + filepath.Join(data, "new.txt") + " && echo WROTE")
				if err != nil || strings.Contains(out, "WROTE") {
					return fmt.Errorf("allow_read was writable: %q %v", out, err)
				}
				out, err = probe("cat " + deploy.LayoutFor(stateDir, id).ConfigFile + " && echo READ")
				if err != nil || strings.Contains(out, "READ") {
					return fmt.Errorf("the runner's own config was readable: %q %v", out, err)
				}
				out, err = probe("echo ok > note.txt && cat note.txt")
				if err != nil || !strings.Contains(out, "ok") {
					return fmt.Errorf("workspace not writable: %q %v", out, err)
				}
				return nil
			},
		}},
	})
}

// freePort asks the kernel for a loopback port that is free right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
