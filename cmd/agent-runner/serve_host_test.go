package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// hostServe runs `agent-runner serve` in host mode (no container mode) on a
// unix socket and returns an HTTP client for it, the service's stderr and
// the agent's workspace.
func hostServe(t *testing.T, fa landlock.FileAccess, env []string, flags ...string) (*http.Client, *lockedBuffer, string) {
	t.Helper()
	bin := testutil.RunnerBinary(t)
	dir := testutil.SharedTempDir(t)
	ws := filepath.Join(dir, "workspace")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "runner.sock")
	cfg := &agentspec.Config{
		AgentID:    "tf-acc-host",
		Workspace:  ws,
		Listen:     "unix://" + sock,
		Token:      "test-token",
		Container:  agentspec.ContainerMode{TimeoutSeconds: 60},
		FileAccess: fa,
	}
	cfg.LLM.Provider = "offline"
	cfgPath := filepath.Join(dir, "runner.json")
	if err := agentspec.WriteConfig(cfgPath, cfg); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--config", cfgPath}, flags...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// An interrupt is serve's graceful stop: it must exit cleanly.
		if err := testutil.Gone(cmd.Process.Signal(os.Interrupt)); err != nil {
			t.Errorf("cleanup: interrupt serve: %v", err)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("cleanup: serve after interrupt: %v", err)
		}
	})
	c := unixClient(sock)
	waitUp(t, c, 10*time.Second, stderr.String)
	return c, stderr, ws
}

// post sends a message and returns the status and the decoded body.
func post(t *testing.T, c *http.Client, text string) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(runner.MessageRequest{Text: text})
	req, _ := http.NewRequest(http.MethodPost, "http://runner/v1/messages", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer test-token")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("body %q: %v", raw, err)
	}
	return resp.StatusCode, m
}

func TestServeHostMode(t *testing.T) {
	if landlock.DetectABI() < landlock.MinNetABI {
		t.Skip("kernel without Landlock ABI 4")
	}
	root := testutil.SharedTempDir(t)
	a := filepath.Join(root, "a")
	b := filepath.Join(root, "b")
	secret := filepath.Join(b, "secret")
	for _, d := range []string{a, secret} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Must(t, os.WriteFile(filepath.Join(a, "data.txt"), []byte("read-me"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(secret, "key"), []byte("top-secret"), 0o644))
	fa := landlock.FileAccess{AllowRead: []string{a}, AllowReadWrite: []string{b}, Deny: []string{secret}, AllowNetwork: true}

	c, _, _ := hostServe(t, fa, nil)
	resp, err := c.Get("http://runner/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	testutil.Must(t, json.NewDecoder(resp.Body).Decode(&h))
	_ = resp.Body.Close()
	if h["mode"] != "host" || h["landlock_abi"] != float64(landlock.DetectABI()) {
		t.Errorf("healthz = %v, want mode host and landlock_abi %d", h, landlock.DetectABI())
	}
	// A root runner gives the agent its own uid and hides denied paths.
	if os.Geteuid() == 0 && (h["agent_uid"] != float64(agentspec.AgentUID("tf-acc-host")) || h["deny_inside"] != "mount") {
		t.Errorf("healthz = %v, want agent_uid %d and deny_inside mount", h, agentspec.AgentUID("tf-acc-host"))
	}

	status, m := post(t, c, "!sh cat "+filepath.Join(a, "data.txt"))
	if status != 200 || !strings.Contains(fmt.Sprint(m["reply"]), "read-me") {
		t.Errorf("reading A over HTTP: %d %v", status, m)
	}
	status, m = post(t, c, "!sh cat "+filepath.Join(secret, "key"))
	// Denied by Landlock, or (a root runner) hidden by an empty mount.
	if reply := fmt.Sprint(m["reply"]); status != 200 || !strings.HasPrefix(reply, "exit 1") ||
		!(strings.Contains(reply, "Permission denied") || strings.Contains(reply, "No such file")) || strings.Contains(reply, "top-secret") {
		t.Errorf("reading B/secret over HTTP: %d %v", status, m)
	}

	// --unrestricted: a warning at start, and no rules.
	c2, stderr, _ := hostServe(t, fa, nil, "--unrestricted")
	status, m = post(t, c2, "!sh cat "+filepath.Join(secret, "key"))
	if status != 200 || !strings.Contains(fmt.Sprint(m["reply"]), "top-secret") {
		t.Errorf("unrestricted read: %d %v", status, m)
	}
	if log := stderr.String(); !strings.Contains(log, "[WARN]") || !strings.Contains(log, "UNRESTRICTED") {
		t.Errorf("serve --unrestricted logged no warning:\n%s", log)
	}
}

func TestServeHostModeFailsClosed(t *testing.T) {
	if landlock.DetectABI() < 1 {
		t.Skip("kernel without Landlock")
	}
	// The test hook makes the service see a kernel with ABI 3: TCP rules
	// cannot be enforced, so a message with allow_network = false must fail
	// with a sandbox error and run nothing: the command, had it run in any
	// form, would have left a file in the workspace (always writable).
	c, _, ws := hostServe(t, landlock.FileAccess{AllowNetwork: false}, []string{landlock.MaxABIEnv + "=3"})
	status, m := post(t, c, "!sh echo ran > ran.txt")
	e, _ := m["error"].(map[string]any)
	if status != http.StatusInternalServerError || e["kind"] != "sandbox" ||
		!strings.Contains(fmt.Sprint(e["message"]), "need Landlock ABI 4 or newer, and this kernel has Landlock ABI 3") {
		t.Errorf("ABI 3 with allow_network = false: %d %v", status, m)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused message ran anyway: %s/ran.txt: %v", ws, err)
	}
	resp, err := c.Get("http://runner/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	testutil.Must(t, json.NewDecoder(resp.Body).Decode(&h))
	_ = resp.Body.Close()
	if h["landlock_abi"] != float64(3) {
		t.Errorf("healthz landlock_abi = %v, want the overridden 3", h["landlock_abi"])
	}
}

// file_access.unrestricted = true in the config file, with no flag, is the
// same as --unrestricted: the service warns at start, and no rules hold. A
// restricted service says nothing of the kind.
func TestServeUnrestrictedConfigWarns(t *testing.T) {
	if landlock.DetectABI() < landlock.MinNetABI {
		t.Skip("kernel without Landlock ABI 4")
	}
	outside := filepath.Join(testutil.SharedTempDir(t), "outside.txt")
	if err := os.WriteFile(outside, []byte("not granted"), 0o644); err != nil {
		t.Fatal(err)
	}

	c, stderr, _ := hostServe(t, landlock.FileAccess{Unrestricted: true}, nil)
	status, m := post(t, c, "!sh cat "+outside)
	if status != 200 || !strings.Contains(fmt.Sprint(m["reply"]), "not granted") {
		t.Errorf("unrestricted from the config: reading an ungranted file: %d %v", status, m)
	}
	log := stderr.String()
	if !strings.Contains(log, "[WARN]") || !strings.Contains(log, "UNRESTRICTED") {
		t.Errorf("file_access.unrestricted = true logged no warning at start:\n%s", log)
	}
	if strings.Contains(log, "--unrestricted:") {
		t.Errorf("the warning names the flag, which was not given:\n%s", log)
	}

	c, stderr, _ = hostServe(t, landlock.FileAccess{AllowNetwork: true}, nil)
	status, m = post(t, c, "!sh cat "+outside)
	if reply := fmt.Sprint(m["reply"]); status != 200 || strings.Contains(reply, "not granted") {
		t.Errorf("restricted: reading an ungranted file: %d %v", status, m)
	}
	if log := stderr.String(); strings.Contains(log, "UNRESTRICTED") {
		t.Errorf("a restricted service warned about running unrestricted:\n%s", log)
	}
}
