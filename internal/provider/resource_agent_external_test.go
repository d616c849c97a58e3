package provider

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccAgent_external: with runner.deployment = "external" the provider
// writes the runner's config (0600, outside the workspace) and metadata and
// runs no runner container; the config it wrote is enough for an operator's
// `agent-runner serve --config <file>` (started here as a subprocess, in
// container mode) to answer a message at the computed endpoint with the
// computed token. Destroy removes the runner's files and keeps the workspace.
func TestAccAgent_external(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	stateDir := t.TempDir()
	id := "tf-acc-agent-ext" + "-" + runID
	wsPath := filepath.Join(stateDir, "agents", id)
	layout := deploy.LayoutFor(stateDir, id)
	cleanupAgent(t, cli, id)
	cfg := agentAccConfig(stateDir, id, image, "512m", `runner = { deployment = "external" }`)

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			if _, err := os.Stat(layout.Dir); !os.IsNotExist(err) {
				return fmt.Errorf("runner files left after destroy (%s): %v", layout.Dir, err)
			}
			return checkWorkspace(wsPath)
		},
		Steps: []resource.TestStep{{
			Config: cfg,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("runner_status"), knownvalue.StringExact("external")),
				statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("runner_container_id"), knownvalue.StringExact("")),
				statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("endpoint"), knownvalue.StringExact("unix://"+layout.Socket)),
				statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("token"), knownvalue.StringRegexp(hex64)),
				statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("config_hash"), knownvalue.StringRegexp(hex64)),
				statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("landlock_abi"), knownvalue.Null()),
				statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("agent_uid"), knownvalue.Null()),
			},
			Check: func(s *terraform.State) error {
				a := s.RootModule().Resources["meepa_agent.t"].Primary.Attributes
				if err := checkWorkspace(wsPath); err != nil {
					return err
				}
				// The config and the metadata: 0600, outside the workspace,
				// and the config is the runner's for this agent.
				if rel, err := filepath.Rel(wsPath, layout.ConfigFile); err != nil || !strings.HasPrefix(rel, "..") {
					return fmt.Errorf("runner config %s inside the workspace", layout.ConfigFile)
				}
				for _, f := range []string{layout.ConfigFile, deploy.MetaFile(layout)} {
					if err := checkFileMode(f, 0o600); err != nil {
						return err
					}
				}
				c, err := agentspec.LoadConfig(layout.ConfigFile)
				if err != nil {
					return fmt.Errorf("runner config: %w", err)
				}
				if c.AgentID != id || c.Workspace != wsPath || c.Token != a["token"] || !c.Container.Enabled || c.Container.Image != image ||
					c.Listen != "unix://"+layout.Socket || c.LLM.APIKey != testAPIKey {
					return fmt.Errorf("runner config: agent %q workspace %q listen %q container %+v token matches %v key matches %v",
						c.AgentID, c.Workspace, c.Listen, c.Container, c.Token == a["token"], c.LLM.APIKey == testAPIKey)
				}
				if meta, err := deploy.ReadMeta(layout); err != nil || meta.Deployment != "external" {
					return fmt.Errorf("metadata: %+v %v", meta, err)
				}
				// No runner container: the operator runs the service.
				if _, err := cli.ContainerInspect(context.Background(), deploy.ContainerName(id)); !cerrdefs.IsNotFound(err) {
					return fmt.Errorf("container %s exists for an external runner (inspect: %v)", deploy.ContainerName(id), err)
				}
				// What the operator's unit runs, run by hand.
				return serveExternal(t, layout, id, a["endpoint"], a["token"])
			},
		}, {
			Config: cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
			},
		}},
	})
}

// serveExternal runs `agent-runner serve --config <layout's config>` as a
// subprocess, sends one message to endpoint with token (and one without),
// and stops it.
func serveExternal(t *testing.T, layout deploy.Layout, agentID, endpoint, token string) (err error) {
	l, err := deploy.ParseListen(endpoint)
	if err != nil {
		return fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	cmd := exec.Command(testutil.RunnerBinary(t), "serve", "--config", layout.ConfigFile)
	logs := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("agent-runner serve: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		// How it exits is not this test's question (logged); that it exits is.
		var werr error
		select {
		case werr = <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			werr = <-exited
		}
		t.Logf("external runner exited: %v", werr)
		if err == nil {
			// Stopped, the runner leaves no per-message container behind
			// (not even a prestarted one).
			left, lerr := testutil.Docker(t).ContainerList(context.Background(), container.ListOptions{All: true, Filters: sandbox.OrphanFilter(agentID)})
			if lerr != nil || len(left) != 0 {
				err = fmt.Errorf("after the external runner stopped, %d of its message containers are left (%v)", len(left), lerr)
			}
		}
		if err != nil {
			err = fmt.Errorf("%w\nagent-runner serve logs:\n%s", err, lastLines(logs.String(), 30))
		}
	}()
	for deadline := time.Now().Add(60 * time.Second); ; {
		h, herr := deploy.CheckHealth(context.Background(), l)
		if herr == nil {
			// The message below must run in a per-message container, as
			// the config says, for this agent.
			if h["mode"] != "container" || h["agent_id"] != agentID {
				return fmt.Errorf("external runner healthz %v, want mode container for %s", h, agentID)
			}
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("the external runner never became healthy: %w", herr)
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("agent-runner serve exited: %v", werr)
		case <-time.After(100 * time.Millisecond):
		}
	}
	reply, code, err := sendTo(l, token, "hello")
	if err != nil || code != 200 || reply.Reply != agent.OfflineAnswer("hello") {
		return fmt.Errorf("message: %d %v %+v", code, err, reply)
	}
	if _, code, err := sendTo(l, "", "hello"); err != nil || code != http.StatusUnauthorized {
		return fmt.Errorf("without token: %d %v, want 401", code, err)
	}
	return nil
}

// TestAgent_externalHostModeNeedsNoDaemon: an agent whose runner an
// operator runs, in Landlock host mode, has nothing for the provider to do
// on Docker, so create, plan and destroy work with the daemon unreachable.
// A unit test: it only writes files under a temporary state_dir.
func TestAgent_externalHostModeNeedsNoDaemon(t *testing.T) {
	stateDir := t.TempDir()
	id := "tf-acc-agent-nod" + "-" + runID
	layout := deploy.LayoutFor(stateDir, id)
	cfg := fmt.Sprintf(`
provider "meepa" {
  state_dir   = %[1]q
  docker_host = "unix://%[1]s/no-daemon.sock"
}

resource "meepa_agent" "t" {
  agent_id = %[2]q
  llm      = { provider = "offline" }
  runner   = { deployment = "external", image = "unused:1" }
}
`, stateDir, id)
	resource.UnitTest(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			if _, err := os.Stat(layout.Dir); !os.IsNotExist(err) {
				return fmt.Errorf("runner files left after destroy (%s): %v", layout.Dir, err)
			}
			return nil
		},
		Steps: []resource.TestStep{{
			Config: cfg,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("runner_status"), knownvalue.StringExact("external")),
			},
			Check: func(*terraform.State) error {
				c, err := agentspec.LoadConfig(layout.ConfigFile)
				if err != nil {
					return err
				}
				if c.Container.Enabled || c.AgentID != id {
					return fmt.Errorf("runner config: agent %q container mode %v", c.AgentID, c.Container.Enabled)
				}
				return nil
			},
		}, {
			Config:   cfg,
			PlanOnly: true,
		}},
	})
}
