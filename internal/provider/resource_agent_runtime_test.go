package provider

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/testkube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccAgent_runtimeRefusedAtPlan: a runtime the daemon does not have
// (no daemon here has crun) is refused by the plan, on
// container_mode.runtime, with the runtimes the daemon has; before, the
// plan passed and apply failed. A runtime it has plans clean.
func TestAccAgent_runtimeRefusedAtPlan(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	config := func(runtime string) string {
		return fmt.Sprintf(`
provider "meepa" {
  state_dir = %q
}

resource "meepa_agent" "t" {
  agent_id = "tf-acc-runtime-%s"
  llm      = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = %q
    runtime = %q
  }
}
`, t.TempDir(), runID, image, runtime)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			{
				Config:      config("crun"),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Runtime Not Available.*no "crun" runtime \(it has:\s[^)]*runc`),
			},
			{Config: config("runc"), PlanOnly: true, ExpectNonEmptyPlan: true},
		},
	})
	// The error is on the attribute (terraform's text shows only the block).
	f := newPlanFixture(t, nil)
	_, d := f.plan(t, withRuntime("crun", "none"))
	want := path.Root("container_mode").AtName("runtime")
	if len(d.Errors()) != 1 || d.Errors()[0].Summary() != "Runtime Not Available" {
		t.Fatalf("want one Runtime Not Available, got %v", d)
	}
	if wp, ok := d.Errors()[0].(diag.DiagnosticWithPath); !ok || !wp.Path().Equal(want) {
		t.Errorf("the error is not on %s: %v", want, d.Errors()[0])
	}
}

// withRuntime edits a planned agent's container_mode runtime and network.
func withRuntime(runtime, network string) func(*agentModel) {
	return func(m *agentModel) {
		attrs := m.ContainerMode.Attributes()
		attrs["runtime"], attrs["network"] = types.StringValue(runtime), types.StringValue(network)
		m.ContainerMode = types.ObjectValueMust(containerModeAttrTypes, attrs)
	}
}

// TestAgentPlan_runscBridgeWarns: an agent on the managed bridge under
// gVisor is told at plan, on container_mode.network, that host names will
// not resolve; the same agent under runc, or under gVisor with no network,
// is told nothing. (No daemon needed: the warning is the configuration's.)
func TestAgentPlan_runscBridgeWarns(t *testing.T) {
	f := newPlanFixture(t, nil)
	const summary = "Names Do Not Resolve Under gVisor"
	with := withRuntime
	if _, d := f.plan(t, with("runsc", "bridge")); len(planWarnings(d, summary)) != 1 {
		t.Errorf("runsc on the bridge: want the warning, got %v", d)
	}
	for _, c := range [][2]string{{"runc", "bridge"}, {"runsc", "none"}} {
		if _, d := f.plan(t, with(c[0], c[1])); len(planWarnings(d, summary)) != 0 {
			t.Errorf("%s on %s: %v", c[0], c[1], d)
		}
	}
}

// TestAccKube_runtimeRefusedAtPlan: on a cluster with no RuntimeClass for
// runsc the plan refuses runtime = "runsc" with the RuntimeClasses it has
// (before, the plan passed and apply failed finding the RuntimeClass).
func TestAccKube_runtimeRefusedAtPlan(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kube-rt")
	rcs, err := c.Clientset.NodeV1().RuntimeClasses().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range rcs.Items {
		if rc.Name == "runsc" || rc.Handler == "runsc" {
			t.Skipf("the test cluster has a RuntimeClass for runsc (%s)", rc.Name)
		}
	}
	cfg := kubeProvider(t, c, testkube.Registry(t)) + `
resource "meepa_agent" "t" {
  agent_id = "kq-runtime"
  llm      = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = "meepagateway-isolated:1"
    network = "none"
    runtime = "runsc"
  }
}
`
	resource.Test(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config:      cfg,
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(`(?s)Runtime Not Available.*no RuntimeClass named "runsc" or with that\s+handler\s+\(it has:\s`),
		}},
	})
}
