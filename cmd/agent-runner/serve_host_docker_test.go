package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/moby/profiles/seccomp"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestServeHostModeInContainer runs `agent-runner serve` in host mode inside
// a hardened runner container (deployment "container"), the workspace and
// the file_access paths mounted at their host paths, once with the daemon's
// default seccomp profile and once with sandbox.RunnerSeccompProfile.
func TestServeHostModeInContainer(t *testing.T) {
	testutil.RequireDocker(t)
	if landlock.DetectABI() < landlock.MinNetABI {
		t.Skip("kernel without Landlock ABI 4")
	}
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	profile, err := sandbox.RunnerSeccompProfile()
	if err != nil {
		t.Fatal(err)
	}
	// The same profile without the landlock syscalls: an engine whose
	// profile predates them.
	var p seccomp.Seccomp
	if err := json.Unmarshal(profile, &p); err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Syscalls {
		s.Names = slices.DeleteFunc(s.Names, func(n string) bool { return strings.HasPrefix(n, "landlock_") })
	}
	noLandlock, _ := json.Marshal(p)
	for _, tc := range []struct {
		name    string
		seccomp string
		// failClosed: the runner must see no Landlock and refuse.
		failClosed bool
	}{
		{"default seccomp profile", "", false},
		{"RunnerSeccompProfile", string(profile), false},
		{"profile without landlock", string(noLandlock), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			testutil.Must(t, os.Chmod(dir, 0o755))
			ws := filepath.Join(dir, "workspace")
			a := filepath.Join(dir, "a")
			for _, d := range []string{ws, a} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			testutil.Must(t, os.WriteFile(filepath.Join(a, "data.txt"), []byte("read-me"), 0o644))
			sock := filepath.Join(dir, "runner.sock")
			cfg := &agentspec.Config{
				AgentID: "tf-acc-host-ctr", Workspace: ws, Listen: "unix://" + sock, Token: "test-token",
				Container:  agentspec.ContainerMode{TimeoutSeconds: 60},
				FileAccess: landlock.FileAccess{AllowRead: []string{a}, AllowNetwork: false},
			}
			cfg.LLM.Provider = "offline"
			cfgPath := filepath.Join(dir, "runner.json")
			if err := agentspec.WriteConfig(cfgPath, cfg); err != nil {
				t.Fatal(err)
			}
			hc := &container.HostConfig{
				ReadonlyRootfs: true,
				CapDrop:        []string{"ALL"},
				SecurityOpt:    []string{"no-new-privileges"},
				Tmpfs:          map[string]string{"/tmp": "size=64m"},
				Mounts: []mount.Mount{
					{Type: mount.TypeBind, Source: dir, Target: dir},
					{Type: mount.TypeBind, Source: a, Target: a, ReadOnly: true},
				},
			}
			if tc.seccomp != "" {
				hc.SecurityOpt = append(hc.SecurityOpt, "seccomp="+tc.seccomp)
			}
			ctx := context.Background()
			created, err := cli.ContainerCreate(ctx, &container.Config{
				Image:  image,
				Cmd:    []string{"agent-runner", "serve", "--config", cfgPath},
				Labels: engine.Labels("test", nil),
			}, hc, nil, nil, fmt.Sprintf("meepa-test-hostmode-%d", time.Now().UnixNano()))
			if err != nil {
				t.Fatal(err)
			}
			testutil.Cleanup(t, "remove container", func() error {
				return testutil.Gone(cli.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true}))
			})
			if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
				t.Fatal(err)
			}
			c := unixClient(sock)
			waitUp(t, c, 15*time.Second, nil)
			if tc.failClosed {
				status, m := post(t, c, "!sh echo ran > "+filepath.Join(ws, "ran.txt"))
				e, _ := m["error"].(map[string]any)
				if status != http.StatusInternalServerError || e["kind"] != "sandbox" || !strings.Contains(fmt.Sprint(e["message"]), "no Landlock") {
					t.Errorf("seccomp without landlock: %d %v, want a sandbox error naming the missing Landlock", status, m)
				}
				if _, err := os.Stat(filepath.Join(ws, "ran.txt")); err == nil {
					t.Error("the agent ran without Landlock")
				}
				return
			}
			status, m := post(t, c, "!sh cat "+filepath.Join(a, "data.txt")+" && cat /etc/passwd")
			reply := fmt.Sprint(m["reply"])
			if status != 200 || !strings.Contains(reply, "read-me") || !strings.Contains(reply, "/etc/passwd': Permission denied") {
				t.Errorf("host mode in a runner container: %d %v", status, m)
			}
		})
	}
}
