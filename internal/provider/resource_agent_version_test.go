package provider

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/docker/docker/api/types/image"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/testimage"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
	"github.com/bogpad/terraform-provider-meepa/internal/version"
)

// TestAccAgent_runnerVersionDrift: a runner built as another release (its
// -ldflags version and commit, as GoReleaser and the GNUmakefile set them)
// is drift in the plan after apply, with nothing else changed; the plan's
// update replaces it, and a runner of the provider's build leaves the plan
// empty.
func TestAccAgent_runnerVersionDrift(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	testutil.EnsureBusybox(t, cli)
	current := testutil.EnsureRunnerImage(t, cli)

	const oldVersion, oldCommit = "0.0.1-old", "0ld0000"
	oldBin := filepath.Join(t.TempDir(), "agent-runner")
	mod := "github.com/bogpad/terraform-provider-meepa/internal/version"
	build := exec.Command("go", "build", "-trimpath", "-o", oldBin,
		"-ldflags", fmt.Sprintf("-X %s.Version=%s -X %s.Commit=%s", mod, oldVersion, mod, oldCommit), "./cmd/agent-runner")
	build.Dir = testutil.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build the old runner: %v\n%s", err, out)
	}
	oldImage := "meepa-test/runner-old:" + runID
	if err := testimage.Runner(context.Background(), cli, oldImage, testutil.BusyboxImage, oldBin); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove image "+oldImage, func() error {
		_, err := cli.ImageRemove(context.Background(), oldImage, image.RemoveOptions{Force: true})
		return testutil.Gone(err)
	})

	stateDir := t.TempDir()
	id := "tf-acc-agent-ver-" + runID
	layout := deploy.LayoutFor(stateDir, id)
	cleanupAgent(t, cli, id)

	// reports asks the running runner which build it is.
	reports := func(want version.Info) resource.TestCheckFunc {
		return func(*terraform.State) error {
			h, err := deploy.CheckHealth(context.Background(), deploy.Listener{Unix: layout.Socket})
			if err != nil {
				return err
			}
			if got, ok := h.Build(); !ok || got != want {
				return fmt.Errorf("runner reports %+v (%v), want %+v", got, ok, want)
			}
			return nil
		}
	}

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			{
				// Applied with the old runner: the refresh right after finds
				// it, although its configuration is what was applied.
				Config:             agentAccConfig(stateDir, id, oldImage, "256m", ""),
				Check:              reports(version.Info{Version: oldVersion, Commit: oldCommit}),
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PostApplyPostRefresh: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction("meepa_agent.t", plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("runner_status"), knownvalue.StringExact("running")),
						plancheck.ExpectUnknownValue("meepa_agent.t", tfjsonpath.New("runner_container_id")),
					},
				},
			},
			{
				// The provider's build: replaced, and the next plan is empty.
				Config: agentAccConfig(stateDir, id, current, "256m", ""),
				Check:  reports(version.Current()),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("runner_status"), knownvalue.StringExact("running")),
				},
			},
		},
	})
}
