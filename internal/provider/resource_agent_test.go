package provider

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
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

// TestAccAgent_lifecycle walks the scenario with real terraform and
// the real daemon: create, message, empty plan, import, update, drift,
// destroy that keeps the workspace.
func TestAccAgent_lifecycle(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	stateDir := t.TempDir()
	id := "tf-acc-agent-life" + "-" + runID
	wsPath := filepath.Join(stateDir, "agents", id)
	layout := deploy.LayoutFor(stateDir, id)
	cleanupAgent(t, cli, id)
	var firstRunner, prevHash, prevToken string
	marker := filepath.Join(wsPath, "skills", "agent-note.md")

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			// Destroy removes the runner and its secret-holding files,
			// and keeps the workspace.
			if st, err := deploy.Inspect(context.Background(), cli, id); err != nil || st.State != "missing" {
				return fmt.Errorf("runner after destroy: %+v %v", st, err)
			}
			if _, err := os.Stat(layout.ConfigFile); !os.IsNotExist(err) {
				return fmt.Errorf("runner config left after destroy: %v", err)
			}
			if raw, err := os.ReadFile(marker); err != nil || string(raw) != "mine" {
				return fmt.Errorf("workspace not kept on destroy: %v", err)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: agentAccConfig(stateDir, id, image, "512m", ""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("workspace_path"), knownvalue.StringExact(wsPath)),
					statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("endpoint"), knownvalue.StringExact("unix://"+layout.Socket)),
					statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("runner_status"), knownvalue.StringExact("running")),
					statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("token"), knownvalue.StringRegexp(hex64)),
					statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("config_hash"), knownvalue.StringRegexp(hex64)),
					statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("llm").AtMapKey("api_key"), knownvalue.Null()),
					statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("container_mode").AtMapKey("timeout_seconds"), knownvalue.Int64Exact(300)),
					// A container-mode agent has no file_access (host mode only).
					statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("file_access"), knownvalue.Null()),
				},
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["meepa_agent.t"].Primary.Attributes
					firstRunner = a["runner_container_id"]
					if err := checkWorkspace(wsPath); err != nil {
						return err
					}
					if err := os.WriteFile(marker, []byte("mine"), 0o600); err != nil {
						return err
					}
					if err := checkFileMode(layout.ConfigFile, 0o600); err != nil {
						return err
					}
					st, err := deploy.Inspect(context.Background(), cli, id)
					if err != nil || st.State != "running" || st.ID != firstRunner {
						return fmt.Errorf("runner: %+v %v (state says %s)", st, err, firstRunner)
					}
					tok := a["token"]
					reply, code, err := sendMessage(layout.Socket, tok, "hello")
					if err != nil || code != 200 {
						return fmt.Errorf("message: %d %v", code, err)
					}
					if reply.Reply != agent.OfflineAnswer("hello") {
						return fmt.Errorf("reply %q", reply.Reply)
					}
					if _, code, err := sendMessage(layout.Socket, "", "hello"); err != nil || code != http.StatusUnauthorized {
						return fmt.Errorf("without token: %d %v, want 401", code, err)
					}
					if _, code, err := sendMessage(layout.Socket, strings.Repeat("0", 64), "hello"); err != nil || code != http.StatusUnauthorized {
						return fmt.Errorf("wrong token: %d %v, want 401", code, err)
					}
					return nil
				},
			},
			{
				// A second plan is empty.
				Config: agentAccConfig(stateDir, id, image, "512m", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
			},
			{
				ResourceName:                         "meepa_agent.t",
				ImportState:                          true,
				ImportStateId:                        id,
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "agent_id",
				// The API key is write-only: never in state, so never read back.
				ImportStateVerifyIgnore: []string{"llm.api_key"},
			},
			{
				// A new memory limit replaces the runner and leaves the
				// workspace alone; the next message's container has it.
				Config: agentAccConfig(stateDir, id, image, "256m", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction("meepa_agent.t", plancheck.ResourceActionUpdate),
						plancheck.ExpectUnknownValue("meepa_agent.t", tfjsonpath.New("runner_container_id")),
					},
				},
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["meepa_agent.t"].Primary.Attributes
					prevHash = a["config_hash"]
					if a["runner_container_id"] == firstRunner {
						return fmt.Errorf("runner not replaced")
					}
					if raw, err := os.ReadFile(marker); err != nil || string(raw) != "mine" {
						return fmt.Errorf("workspace touched by the update: %v", err)
					}
					if raw, _ := os.ReadFile(filepath.Join(wsPath, "SOUL.md")); string(raw) != "You are a test agent." {
						return fmt.Errorf("SOUL.md changed: %q", raw)
					}
					return checkMessageContainer(t, cli, layout.Socket, a["token"], id, wsPath, 256<<20)
				},
			},
			{
				// A new write-only API key is seen through config_hash and
				// replaces the runner, though state never held the key.
				Config: agentAccConfigKey(stateDir, id, image, "256m", testAPIKeyRotated, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction("meepa_agent.t", plancheck.ResourceActionUpdate),
						plancheck.ExpectUnknownValue("meepa_agent.t", tfjsonpath.New("runner_container_id")),
					},
				},
				Check: func(s *terraform.State) error {
					if s.RootModule().Resources["meepa_agent.t"].Primary.Attributes["config_hash"] == prevHash {
						return fmt.Errorf("config_hash unchanged by a new API key")
					}
					a := s.RootModule().Resources["meepa_agent.t"].Primary.Attributes
					c, err := agentspec.LoadConfig(layout.ConfigFile)
					if err != nil || c.LLM.APIKey != testAPIKeyRotated {
						return fmt.Errorf("runner config not rewritten with the new key: %v", err)
					}
					// The rotated runner has handled a message (so its logs
					// and the workspace have seen the new key at work) before
					// both keys are looked for.
					reply, code, err := sendMessage(layout.Socket, a["token"], "rotated")
					if err != nil || code != 200 || reply.Reply != agent.OfflineAnswer("rotated") {
						return fmt.Errorf("message after rotation: %d %v %+v", code, err, reply)
					}
					return checkNoSecrets(cli, id, wsPath, testAPIKeyRotated)
				},
			},
			{
				// The runner removed out of band is drift; apply restores it.
				PreConfig: func() {
					if err := cli.ContainerRemove(context.Background(), deploy.ContainerName(id), container.RemoveOptions{Force: true}); err != nil {
						t.Fatal(err)
					}
				},
				Config: agentAccConfig(stateDir, id, image, "256m", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction("meepa_agent.t", plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("runner_status"), knownvalue.StringExact("running")),
					},
				},
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["meepa_agent.t"].Primary.Attributes
					reply, code, err := sendMessage(layout.Socket, a["token"], "again")
					if err != nil || code != 200 || reply.Reply != agent.OfflineAnswer("again") {
						return fmt.Errorf("message after restore: %d %v %+v", code, err, reply)
					}
					prevToken = a["token"]
					if raw, err := os.ReadFile(marker); err != nil || string(raw) != "mine" {
						return fmt.Errorf("workspace touched by the restore: %v", err)
					}
					// The key rotated two steps ago is gone with its runner.
					return checkNoSecrets(cli, id, wsPath, testAPIKeyRotated)
				},
			},
			{
				// A runner stopped out of band (restart unless-stopped keeps
				// it down) is drift as well.
				PreConfig: func() {
					timeout := 10
					if err := cli.ContainerStop(context.Background(), deploy.ContainerName(id), container.StopOptions{Timeout: &timeout}); err != nil {
						t.Fatal(err)
					}
				},
				Config: agentAccConfig(stateDir, id, image, "256m", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction("meepa_agent.t", plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("runner_status"), knownvalue.StringExact("running")),
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("runner_status"), knownvalue.StringExact("running")),
				},
			},
			{
				// token_version 0 is unset: nothing rotates.
				Config: agentAccConfig(stateDir, id, image, "256m", "token_version = 0"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction("meepa_agent.t", plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue("meepa_agent.t", tfjsonpath.New("runner_container_id"), knownvalue.NotNull()),
					},
				},
				Check: func(s *terraform.State) error {
					if s.RootModule().Resources["meepa_agent.t"].Primary.Attributes["token"] != prevToken {
						return fmt.Errorf("token_version 0 rotated the token")
					}
					return nil
				},
			},
			{
				// A new token_version rotates the token: the plan says so,
				// the new runner takes only the new one.
				Config: agentAccConfig(stateDir, id, image, "256m", "token_version = 1"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction("meepa_agent.t", plancheck.ResourceActionUpdate),
						plancheck.ExpectUnknownValue("meepa_agent.t", tfjsonpath.New("token")),
						plancheck.ExpectUnknownValue("meepa_agent.t", tfjsonpath.New("runner_container_id")),
					},
				},
				Check: func(s *terraform.State) error {
					tok := s.RootModule().Resources["meepa_agent.t"].Primary.Attributes["token"]
					if tok == prevToken || len(tok) != 64 {
						return fmt.Errorf("token not rotated: %d characters, same as before: %v", len(tok), tok == prevToken)
					}
					if _, code, err := sendMessage(layout.Socket, prevToken, "old"); err != nil || code != http.StatusUnauthorized {
						return fmt.Errorf("the old token after rotation: %d %v, want 401", code, err)
					}
					reply, code, err := sendMessage(layout.Socket, tok, "new")
					if err != nil || code != 200 || reply.Reply != agent.OfflineAnswer("new") {
						return fmt.Errorf("the new token: %d %v %+v", code, err, reply)
					}
					return nil
				},
			},
			{
				Config: agentAccConfig(stateDir, id, image, "256m", "token_version = 1"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
			},
		},
	})
}

// TestAccAgent_forceDestroyWorkspace: manage_soul and workspace drift, and
// with force_destroy_workspace the workspace goes with the agent.
func TestAccAgent_forceDestroyWorkspace(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	stateDir := t.TempDir()
	id := "tf-acc-agent-force" + "-" + runID
	wsPath := filepath.Join(stateDir, "agents", id)
	cleanupAgent(t, cli, id)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			if _, err := os.Stat(wsPath); !os.IsNotExist(err) {
				return fmt.Errorf("workspace kept despite force_destroy_workspace: %v", err)
			}
			if st, _ := deploy.Inspect(context.Background(), cli, id); st.State != "missing" {
				return fmt.Errorf("runner left: %+v", st)
			}
			return nil
		},
		Steps: []resource.TestStep{{
			Config: agentAccConfig(stateDir, id, image, "512m", "force_destroy_workspace = true\n  manage_soul = true"),
			Check: func(*terraform.State) error {
				return checkWorkspace(wsPath)
			},
		}, {
			// With manage_soul the agent's edit of SOUL.md is drift, and
			// the apply writes the configured soul back.
			PreConfig: func() {
				if err := os.WriteFile(filepath.Join(wsPath, "SOUL.md"), []byte("I rewrote myself."), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			Config: agentAccConfig(stateDir, id, image, "512m", "force_destroy_workspace = true\n  manage_soul = true"),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("meepa_agent.t", plancheck.ResourceActionUpdate)},
			},
			Check: func(*terraform.State) error {
				return checkWorkspace(wsPath)
			},
		}, {
			// The workspace removed out of band is drift too: it comes
			// back (with a warning that its contents were lost, which
			// TestAccAgent_workspaceLostWarning reads).
			PreConfig: func() {
				if err := os.RemoveAll(wsPath); err != nil {
					t.Fatal(err)
				}
			},
			Config: agentAccConfig(stateDir, id, image, "512m", "force_destroy_workspace = true\n  manage_soul = true"),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meepa_agent.t", plancheck.ResourceActionUpdate),
					plancheck.ExpectUnknownValue("meepa_agent.t", tfjsonpath.New("runner_container_id")),
				},
			},
			Check: func(s *terraform.State) error {
				if err := checkWorkspace(wsPath); err != nil {
					return err
				}
				// The next message writes into the new directory, not into
				// the one a prestarted container still had mounted.
				tok := s.RootModule().Resources["meepa_agent.t"].Primary.Attributes["token"]
				sock := deploy.LayoutFor(stateDir, id).Socket
				if _, code, err := sendMessage(sock, tok, "!sh echo after > after.txt"); err != nil || code != 200 {
					return fmt.Errorf("message: %d %v", code, err)
				}
				if raw, err := os.ReadFile(filepath.Join(wsPath, "after.txt")); err != nil || string(raw) != "after\n" {
					return fmt.Errorf("message wrote elsewhere: %q %v", raw, err)
				}
				return nil
			},
		}},
	})
}

// checkMessageContainer sends a message that keeps its container busy and,
// while it runs, reads that container from the daemon: every flag the spec
// lists, the new memory limit, and no secret in its configuration.
func checkMessageContainer(t *testing.T, cli client.APIClient, sock, token, id, ws string, memory int64) error {
	return whileMessageRuns(cli, sock, token, id, func(ci container.InspectResponse, raw []byte) error {
		hc := ci.HostConfig
		switch {
		case hc.Memory != memory || hc.MemorySwap != memory:
			return fmt.Errorf("memory %d swap %d, want %d", hc.Memory, hc.MemorySwap, memory)
		case !hc.ReadonlyRootfs:
			return fmt.Errorf("rootfs writable")
		case len(hc.CapDrop) != 1 || !strings.EqualFold(hc.CapDrop[0], "ALL") || len(hc.CapAdd) != 0:
			return fmt.Errorf("caps drop %v add %v", hc.CapDrop, hc.CapAdd)
		case !containsStr(hc.SecurityOpt, "no-new-privileges") && !containsStr(hc.SecurityOpt, "no-new-privileges:true"):
			return fmt.Errorf("security opts %v", hc.SecurityOpt)
		case !strings.Contains(hc.Tmpfs["/tmp"], "size=256m"):
			return fmt.Errorf("tmpfs %v", hc.Tmpfs)
		case hc.Privileged || hc.PidsLimit == nil || *hc.PidsLimit <= 0:
			return fmt.Errorf("privileged %v pids %v", hc.Privileged, hc.PidsLimit)
		case !containsStr(ci.Config.Env, "HOME=/workspace") || !containsStr(ci.Config.Env, "TMPDIR=/tmp"):
			return fmt.Errorf("env %v", ci.Config.Env)
		case ci.Config.WorkingDir != "/workspace":
			return fmt.Errorf("workdir %q", ci.Config.WorkingDir)
		case string(hc.NetworkMode) != "none":
			return fmt.Errorf("network %q", hc.NetworkMode)
		}
		// The workspace, and the relay's socket directory read-only: an
		// agent that holds a key has a relay (its scrub route) even offline.
		var wsMounts, relay int
		for _, m := range ci.Mounts {
			switch {
			case m.Source == ws && m.Destination == "/workspace" && m.RW:
				wsMounts++
			case m.Destination == sandbox.RelayMountDir && !m.RW:
				relay++
			default:
				return fmt.Errorf("mount %+v: want only %s at /workspace and the relay at %s", m, ws, sandbox.RelayMountDir)
			}
		}
		if wsMounts != 1 || relay > 1 {
			return fmt.Errorf("mounts %+v, want %s at /workspace once and at most the relay beside it", ci.Mounts, ws)
		}
		if bytes.Contains(raw, []byte(testAPIKey)) || bytes.Contains(raw, []byte(testSecret)) {
			return fmt.Errorf("a secret is in docker inspect of the message container")
		}
		return nil
	})
}

// checkNoSecrets: the API key, the secret and any further values (a
// rotated key) are in no workspace file, not in the runner's logs and not in
// its docker inspect.
func checkNoSecrets(cli client.APIClient, id, ws string, more ...string) error {
	secrets := append([]string{testAPIKey, testSecret}, more...)
	names := []string{"the API key", "the secret"}
	for i := range more {
		names = append(names, fmt.Sprintf("extra value %d", i+1))
	}
	// holds names the first secret in raw; the error never prints it.
	holds := func(raw []byte) string {
		for i, s := range secrets {
			if bytes.Contains(raw, []byte(s)) {
				return names[i]
			}
		}
		return ""
	}
	err := filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if s := holds(raw); s != "" {
			return fmt.Errorf("%s is in workspace file %s", s, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	ctx := context.Background()
	logs := deploy.LogTail(ctx, cli, deploy.ContainerName(id), 10000)
	if s := holds([]byte(logs)); s != "" {
		return fmt.Errorf("%s is in the runner's logs", s)
	}
	if logs == "" {
		return fmt.Errorf("the runner logged nothing; the check would prove nothing")
	}
	_, raw, err := cli.ContainerInspectWithRaw(ctx, deploy.ContainerName(id), false)
	if err != nil {
		return err
	}
	if s := holds(raw); s != "" {
		return fmt.Errorf("%s is in docker inspect of the runner", s)
	}
	return nil
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestAccAgent_runnerFails: an image without agent-runner gives a clear
// error with the runner's log, and leaves no crash-looping container and no
// config with secrets behind.
func TestAccAgent_runnerFails(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	bad := testutil.EnsureBusybox(t, cli)
	stateDir := t.TempDir()
	id := "tf-acc-agent-fail" + "-" + runID
	cleanupAgent(t, cli, id)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config:      agentAccConfig(stateDir, id, bad, "512m", ""),
			ExpectError: regexp.MustCompile(`(?s)Runner (Deploy Failed|Unhealthy).*agent-runner`),
		}, {
			// Checked here, before the test framework's destroy: the
			// failed create must itself have cleaned up.
			PreConfig: func() {
				if st, _ := deploy.Inspect(context.Background(), cli, id); st.State != "missing" {
					t.Fatalf("a failed runner was left: %+v", st)
				}
				if _, err := os.Stat(deploy.LayoutFor(stateDir, id).ConfigFile); !os.IsNotExist(err) {
					t.Fatalf("the config with secrets was left: %v", err)
				}
			},
			Config:             agentAccConfig(stateDir, id, bad, "512m", ""),
			PlanOnly:           true,
			ExpectNonEmptyPlan: true,
		}},
		CheckDestroy: func(*terraform.State) error {
			if st, _ := deploy.Inspect(context.Background(), cli, id); st.State != "missing" {
				return fmt.Errorf("a failed runner was left: %+v", st)
			}
			if _, err := os.Stat(deploy.LayoutFor(stateDir, id).ConfigFile); !os.IsNotExist(err) {
				return fmt.Errorf("the config with secrets was left: %v", err)
			}
			return nil
		},
	})
}
