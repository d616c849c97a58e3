package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccFleetModuleThroughTheCLI drives examples/fleet's module with the
// real terraform CLI (terraform-plugin-testing installs no modules and
// reads no for_each state), the provider built as an operator's would be
// and named by dev_overrides: one apply makes the topology and a fleet of
// every role whose core agent asks the others by key; then a soul, an
// allow entry and the per-message image change, one apply each, with the
// plan's counts asserted before each (and what it warns of); destroy
// leaves nothing. The second plan after every apply is empty.
func TestAccFleetModuleThroughTheCLI(t *testing.T) {
	testutil.RequireDocker(t)
	testAccPreCheck(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	// A second tag of the same image: a new image reference, as a
	// package change gives an isolation image.
	image2 := image + "-fleet2"
	if out, err := exec.Command("docker", "tag", image, image2).CombinedOutput(); err != nil {
		t.Fatalf("docker tag: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", image2).Run() })
	tg, llm, fetch, egress, _ := freeTopology(t, cli)
	prefix := "tf-acc-cli-" + runID
	for _, k := range []string{"web", "exec", "lead"} {
		cleanupAgent(t, cli, prefix+"-"+k)
	}

	tfBin, rc := devProviderRC(t)
	module, err := filepath.Abs("../../examples/fleet/modules/agent-fleet")
	if err != nil {
		t.Fatal(err)
	}
	dir, stateDir := t.TempDir(), t.TempDir()
	write := func(soul, img string, allow ...string) {
		t.Helper()
		cfg := topologyHCL(stateDir, tg, image, llm, fetch, egress, allow...) + fmt.Sprintf(`
module "fleet" {
  source   = %[1]q
  topology = threegate_network.tg.id
  image    = %[2]q
  prefix   = %[3]q
  agents = {
    web  = { role = "fetch" }
    exec = { role = "tool_exec" }
    lead = { role = "core", soul = %[4]q, ask = ["exec", "web"] }
  }
}
`, module, img, prefix, soul)
		if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tf := func(args ...string) (string, error) {
		cmd := exec.Command(tfBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := tf(args...)
		if err != nil {
			t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			if out, err := tf("destroy", "-auto-approve", "-no-color"); err != nil {
				t.Errorf("cleanup destroy: %v\n%s", err, out)
			}
		}
	})
	// plan writes a plan and returns its counts by action and its text.
	plan := func() (map[string]int, string) {
		t.Helper()
		text := must("plan", "-no-color", "-out=tfplan")
		js := must("show", "-json", "tfplan")
		var p struct {
			ResourceChanges []struct {
				Address string `json:"address"`
				Change  struct {
					Actions []string `json:"actions"`
				} `json:"change"`
			} `json:"resource_changes"`
		}
		if err := json.Unmarshal([]byte(js), &p); err != nil {
			t.Fatalf("plan json: %v", err)
		}
		n := map[string]int{}
		for _, rc := range p.ResourceChanges {
			a := strings.Join(rc.Change.Actions, ",")
			switch a {
			case "no-op", "read":
				continue
			case "delete,create", "create,delete":
				a = "replace"
			}
			n[a]++
			t.Logf("plan: %s %s", a, rc.Address)
		}
		return n, text
	}
	step := func(what string, want map[string]int, warns ...string) {
		t.Helper()
		got, text := plan()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: plan counts %v, want %v\n%s", what, got, want, text)
		}
		for _, w := range warns {
			if !strings.Contains(text, w) {
				t.Errorf("%s: the plan does not say %q:\n%s", what, w, text)
			}
		}
		must("apply", "-no-color", "tfplan")
		if again, text := plan(); len(again) > 0 {
			t.Fatalf("%s: the plan after apply is not empty: %v\n%s", what, again, text)
		}
	}

	write("You lead.", image)
	// Modules only: with dev_overrides the provider needs no init (and
	// init would ask the registry for it).
	must("get", "-no-color")
	step("first apply", map[string]int{"create": 4})
	lead := deploy.LayoutFor(stateDir, prefix+"-lead")
	c, err := agentspec.LoadConfig(lead.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	reply, code, err := sendMessage(lead.Socket, c.Token, "!ask "+prefix+"-exec !sh echo $((6*7))")
	if err != nil || code != 200 || !strings.Contains(reply.Reply, "exit 0\n42") {
		t.Fatalf("lead asks exec: %d %v %q", code, err, reply.Reply)
	}

	write("You lead, briefly.", image)
	step("soul", map[string]int{"update": 1}, "Soul Only Seeds A New Workspace")

	write("You lead, briefly.", image, "pypi.org")
	step("allow entry", map[string]int{"update": 1})

	write("You lead, briefly.", image2, "pypi.org")
	// Terraform folds the like warnings of the other two into one line.
	step("image", map[string]int{"update": 3}, "Runner Will Be Replaced", "meepa-runner-"+prefix+"-", "2 more similar warnings")

	must("destroy", "-auto-approve", "-no-color")
	destroyed = true
	if out := must("state", "list"); strings.TrimSpace(out) != "" {
		t.Errorf("state after destroy: %s", out)
	}
}
