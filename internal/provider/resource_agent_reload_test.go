package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"

	"github.com/docker/docker/api/types/image"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccAgent_imageReload: a new container_mode.image for an agent whose
// runner has an image of its own keeps the runner (the plan knows its
// container id, the daemon shows the same container) and the very next
// message runs in the new image, not in the container prestarted from the
// old one. A change of the agent's own settings (memory_limit) still
// replaces it, and so does a runner made to serve another image out of
// band. The step times are logged: reload against replacement.
func TestAccAgent_imageReload(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	runnerImage := testutil.EnsureRunnerImage(t, cli)
	// The per-message image of the change: the runner image and a marker.
	newImage := "meepa-test/runner-marked:" + runID
	testutil.BuildImage(t, cli, newImage, "FROM "+runnerImage+"\nCOPY marker /marker\n", map[string][]byte{"marker": []byte("marker-of-the-new-image\n")})
	testutil.Cleanup(t, "remove image "+newImage, func() error {
		_, err := cli.ImageRemove(context.Background(), newImage, image.RemoveOptions{Force: true})
		return testutil.Gone(err)
	})

	stateDir := t.TempDir()
	id := "tf-acc-agent-reload-" + runID
	layout := deploy.LayoutFor(stateDir, id)
	cleanupAgent(t, cli, id)
	config := func(perMessage, memory string) string {
		return fmt.Sprintf(`
provider "meepa" {
  state_dir = %q
}

resource "meepa_agent" "t" {
  agent_id = %q
  llm      = { provider = "offline" }
  container_mode = {
    enabled      = true
    image        = %q
    memory_limit = %q
    network      = "none"
  }
  runner = { image = %q }
}
`, stateDir, id, perMessage, memory, runnerImage)
	}
	var runnerID string
	var stepDone time.Time
	// marker sends a message and checks what the per-message container
	// has at /marker.
	marker := func(want string) resource.TestCheckFunc {
		return func(s *terraform.State) error {
			tok := s.RootModule().Resources["meepa_agent.t"].Primary.Attributes["token"]
			reply, code, err := sendMessage(layout.Socket, tok, "!sh cat /marker 2>/dev/null || echo no-marker")
			if err != nil || code != 200 {
				return fmt.Errorf("message: %d %v", code, err)
			}
			if !strings.Contains(reply.Reply, want) {
				return fmt.Errorf("reply %q, want %q", reply.Reply, want)
			}
			return nil
		}
	}
	sameRunner := func(same bool) resource.TestCheckFunc {
		return func(s *terraform.State) error {
			st, err := deploy.Inspect(context.Background(), cli, id)
			if err != nil || st.State != agentspec.StatusRunning {
				return fmt.Errorf("runner: %+v %v", st, err)
			}
			if (st.ID == runnerID) != same {
				return fmt.Errorf("runner container %s, before %s: want same=%t", st.ID, runnerID, same)
			}
			runnerID = st.ID
			return nil
		}
	}
	elapsed := func(what string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			t.Logf("%s: %s from the previous step's end (plan, apply, refresh)", what, time.Since(stepDone).Round(time.Millisecond))
			return nil
		}
	}
	done := func(*terraform.State) error { stepDone = time.Now(); return nil }
	// A client that keeps sending messages while terraform applies: how
	// many were answered, and how many refused or failed.
	var stopProbe func() (ok, failed int)
	probe := func(s *terraform.State) error {
		tok := s.RootModule().Resources["meepa_agent.t"].Primary.Attributes["token"]
		stop := make(chan struct{})
		counts := make(chan [2]int, 1)
		go func() {
			var ok, failed int
			for {
				select {
				case <-stop:
					counts <- [2]int{ok, failed}
					return
				default:
				}
				if _, code, err := sendMessage(layout.Socket, tok, "hello"); err == nil && code == 200 {
					ok++
				} else {
					failed++
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		stopProbe = func() (int, int) { close(stop); c := <-counts; return c[0], c[1] }
		return nil
	}
	probed := func(what string, wantNoFailure bool) resource.TestCheckFunc {
		return func(*terraform.State) error {
			ok, failed := stopProbe()
			t.Logf("%s: during the apply %d messages answered, %d refused or failed", what, ok, failed)
			if wantNoFailure && (failed > 0 || ok == 0) {
				return fmt.Errorf("%s: %d messages answered, %d refused or failed; want every one answered", what, ok, failed)
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
				// The first message leaves a container prestarted from the
				// old image.
				Config: config(runnerImage, "512m"),
				Check:  resource.ComposeTestCheckFunc(sameRunner(false), marker("no-marker"), done, probe),
			},
			{
				Config: config(newImage, "512m"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meepa_agent.t", plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("runner_container_id"), knownvalue.NotNull()),
				}},
				Check: resource.ComposeTestCheckFunc(probed("reload", true), elapsed("new per-message image, runner reloaded"), sameRunner(true),
					marker("marker-of-the-new-image"), done),
			},
			{
				// Out of band, the runner is made to serve another image
				// (its config edited and reloaded): its hash leaves the
				// image out, so Read asks the runner, and the plan replaces
				// it.
				PreConfig: func() {
					cfg, err := agentspec.LoadConfig(layout.ConfigFile)
					if err == nil {
						cfg.Container.Image = runnerImage
						err = deploy.WriteConfig(layout, cfg)
					}
					if err == nil {
						err = cli.ContainerKill(context.Background(), deploy.ContainerName(id), "HUP")
					}
					for i := 0; err == nil && i < 100; i++ {
						h, herr := deploy.CheckHealth(context.Background(), deploy.Listener{Unix: layout.Socket})
						if herr == nil && h["image"] == runnerImage {
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
					t.Fatalf("out-of-band reload: %v", err)
				},
				Config: config(newImage, "512m"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectUnknownValue("meepa_agent.t", tfjsonpath.New("runner_container_id")),
				}},
				Check: resource.ComposeTestCheckFunc(sameRunner(false), marker("marker-of-the-new-image"), done, probe),
			},
			{
				Config: config(newImage, "256m"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectUnknownValue("meepa_agent.t", tfjsonpath.New("runner_container_id")),
				}},
				Check: resource.ComposeTestCheckFunc(probed("replacement", false), elapsed("new memory_limit, runner replaced"), sameRunner(false),
					marker("marker-of-the-new-image")),
			},
			{
				Config:           config(newImage, "256m"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
		},
	})
}
