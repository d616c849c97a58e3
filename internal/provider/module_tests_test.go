package provider

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// devProviderRC builds the provider as an operator's `go build` would and
// returns a CLI configuration whose dev_overrides names it, for tests that
// drive the real terraform CLI beyond what terraform-plugin-testing does
// (modules, `terraform test`). The CLI is the one terraform-plugin-testing
// runs: TF_ACC_TERRAFORM_PATH, else terraform on PATH.
func devProviderRC(t *testing.T) (tfBin, rc string) {
	t.Helper()
	tfBin = os.Getenv("TF_ACC_TERRAFORM_PATH")
	if tfBin == "" {
		var err error
		if tfBin, err = exec.LookPath("terraform"); err != nil {
			t.Skip("no terraform on PATH")
		}
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "terraform-provider-meepa"), ".")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rc = filepath.Join(t.TempDir(), "dev.tfrc")
	if err := os.WriteFile(rc, fmt.Appendf(nil, "provider_installation {\n  dev_overrides {\n    \"bogpad/meepa\" = %q\n  }\n  direct {}\n}\n", bin), 0o600); err != nil {
		t.Fatal(err)
	}
	return tfBin, rc
}

// terraformTest runs `terraform test` on one test file of an example.
func terraformTest(t *testing.T, tfBin, rc, example, file string, vars ...string) {
	t.Helper()
	if v, _ := exec.Command(tfBin, "version").Output(); strings.HasPrefix(string(v), "OpenTofu") {
		// Measured with OpenTofu 1.12.6: mock_provider has no
		// override_during, and `tofu test` crashes (nil pointer in
		// evalContextProviderFunction) on a provider function in an assert.
		t.Skip("the examples' module tests are Terraform's: OpenTofu 1.12 has no override_during and crashes on a provider function in a test assertion")
	}
	args := []string{"test", "-no-color", "-filter=tests/" + file}
	for _, v := range vars {
		args = append(args, "-var", v)
	}
	cmd := exec.Command(tfBin, args...)
	cmd.Dir = filepath.Join("..", "..", "examples", example)
	cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Success!") {
		t.Fatalf("terraform test %s in examples/%s: %v\n%s", file, example, err, out)
	}
	t.Logf("examples/%s: %s", example, strings.TrimSpace(string(out[strings.LastIndex(string(out), "Success!"):])))
}

// TestExampleModuleTests runs the examples' plan-only module tests (a mock
// of the provider: its real schema and functions, no daemon, no cluster).
func TestExampleModuleTests(t *testing.T) {
	tfBin, rc := devProviderRC(t)
	for _, example := range []string{"quickstart", "kubernetes"} {
		t.Run(example, func(t *testing.T) { terraformTest(t, tfBin, rc, example, "plan.tftest.hcl") })
	}
}

// TestAccQuickstartModuleTest applies the quickstart for real through
// `terraform test` (examples/quickstart/tests/apply.tftest.hcl), on a base
// image made here, with agent ids and a topology of its own; terraform test
// destroys it all at the end.
func TestAccQuickstartModuleTest(t *testing.T) {
	testutil.RequireDocker(t)
	testAccPreCheck(t)
	cli := testutil.Docker(t)
	base := testutil.EnsureBusybox(t, cli)
	prefix := "tf-acc-qs-" + runID
	for _, k := range []string{"helper", "exec", "core"} {
		cleanupAgent(t, cli, prefix+"-"+k)
	}
	tfBin, rc := devProviderRC(t)
	terraformTest(t, tfBin, rc, "quickstart", "apply.tftest.hcl",
		"base_image="+base, "agent_prefix="+prefix, "topology_name="+prefix)
}
