package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

func newToolbox(t *testing.T) (*Toolbox, string) {
	t.Helper()
	ws := t.TempDir()
	tb, err := NewToolbox(ws, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + ws})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Errorf("cleanup: close toolbox: %v", err)
		}
	})
	return tb, ws
}

func call(t *testing.T, tb *Toolbox, name string, input map[string]any) ToolResult {
	t.Helper()
	raw, _ := json.Marshal(input)
	return tb.Run(context.Background(), ToolUse{ID: "id", Name: name, Input: raw})
}

func TestFileToolsInsideWorkspace(t *testing.T) {
	tb, ws := newToolbox(t)
	if r := call(t, tb, ToolWriteFile, map[string]any{"path": "a/b/c.txt", "content": "hello"}); r.IsError() {
		t.Fatal(r.Error)
	}
	if r := call(t, tb, ToolReadFile, map[string]any{"path": "a/b/c.txt"}); r.Content != "hello" || r.IsError() {
		t.Errorf("read = %+v", r)
	}
	// An absolute path inside the workspace is the same file.
	if r := call(t, tb, ToolReadFile, map[string]any{"path": filepath.Join(ws, "a/b/c.txt")}); r.Content != "hello" {
		t.Errorf("absolute read = %+v", r)
	}
	testutil.Must(t, os.Symlink("b/c.txt", filepath.Join(ws, "a", "inside-link")))
	if r := call(t, tb, ToolReadFile, map[string]any{"path": "a/inside-link"}); r.Content != "hello" {
		t.Errorf("symlink inside the workspace = %+v", r)
	}
	r := call(t, tb, ToolListFiles, map[string]any{})
	if r.IsError() || r.Content != "a/\na/b/\na/b/c.txt\na/inside-link@" {
		t.Errorf("list = %q (%s)", r.Content, r.Error)
	}
	if r := call(t, tb, ToolListFiles, map[string]any{"path": "a/b"}); r.Content != "a/b/c.txt" {
		t.Errorf("list a/b = %q (%s)", r.Content, r.Error)
	}
}

func TestFileToolsConfinement(t *testing.T) {
	tb, ws := newToolbox(t)
	outside := t.TempDir()
	testutil.Must(t, os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("outside data"), 0o644))
	testutil.Must(t, os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(ws, "link-file")))
	testutil.Must(t, os.Symlink(outside, filepath.Join(ws, "link-dir")))
	testutil.Must(t, os.Symlink("../"+filepath.Base(outside), filepath.Join(ws, "rel-link")))

	escapes := []string{
		"../" + filepath.Base(outside) + "/secret.txt",
		"a/../../x",
		filepath.Join(outside, "secret.txt"),
		"/etc/passwd",
		"link-file",
		"link-dir/secret.txt",
		"rel-link/secret.txt",
	}
	for _, p := range escapes {
		if r := call(t, tb, ToolReadFile, map[string]any{"path": p}); !r.IsError() || strings.Contains(r.Content, "outside data") {
			t.Errorf("read %s: %+v, want refused", p, r)
		}
		if r := call(t, tb, ToolWriteFile, map[string]any{"path": p, "content": "pwned"}); !r.IsError() {
			t.Errorf("write %s: %+v, want refused", p, r)
		}
	}
	for _, p := range []string{"..", "link-dir", "/", outside} {
		if r := call(t, tb, ToolListFiles, map[string]any{"path": p}); !r.IsError() {
			t.Errorf("list %s: %+v, want refused", p, r)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret.txt")); string(b) != "outside data" {
		t.Errorf("the file outside was changed: %q", b)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 {
		t.Errorf("files appeared outside the workspace: %v", entries)
	}
	// The refusal says why.
	if r := call(t, tb, ToolReadFile, map[string]any{"path": "../x"}); !strings.Contains(r.Error, "outside the workspace") {
		t.Errorf("error = %q", r.Error)
	}
}

func TestToolErrors(t *testing.T) {
	tb, _ := newToolbox(t)
	for name, tc := range map[string]struct {
		tool  string
		input string
		want  string
	}{
		"unknown":       {"rm_rf", `{}`, "unknown tool"},
		"bad json":      {ToolShell, `{"command":`, "not the expected JSON"},
		"empty command": {ToolShell, `{}`, "command is empty"},
		"no content":    {ToolWriteFile, `{"path":"x"}`, "content is required"},
		"missing file":  {ToolReadFile, `{"path":"nope"}`, "no such file"},
		"dir read":      {ToolReadFile, `{"path":"."}`, "is a directory"},
	} {
		r := tb.Run(context.Background(), ToolUse{Name: tc.tool, Input: json.RawMessage(tc.input)})
		if !strings.Contains(r.Error, tc.want) {
			t.Errorf("%s: error %q, want %q", name, r.Error, tc.want)
		}
	}
}

func TestShellExitTimeoutAndCap(t *testing.T) {
	tb, _ := newToolbox(t)
	out, code, err := tb.Shell(context.Background(), "exit 7", time.Minute)
	if err != nil || code != 7 || out != "" {
		t.Errorf("exit 7: %q %d %v", out, code, err)
	}
	out, code, err = tb.Shell(context.Background(), "kill -9 $$", time.Minute)
	if err != nil || code != 128+9 {
		t.Errorf("killed: %q %d %v", out, code, err)
	}
	// The timeout kills the whole process group, background children too.
	out, code, err = tb.Shell(context.Background(), "echo started; sleep 30 & sleep 30", 300*time.Millisecond)
	if err == nil || code != ExitTimeout || out != "started\n" {
		t.Errorf("timeout: %q %d %v", out, code, err)
	}
	out, code, err = tb.Shell(context.Background(), "head -c 100000 /dev/zero | tr '\\0' x", time.Minute)
	if err != nil || code != 0 || !strings.HasPrefix(out, strings.Repeat("x", OutputCap)+"\n[output cut at 65536 bytes; 34464 more bytes dropped]") {
		t.Errorf("cap: len %d, tail %q, %d %v", len(out), out[max(0, len(out)-80):], code, err)
	}
	// Stdin is not agent-run's stdin (the request pipe).
	out, _, _ = tb.Shell(context.Background(), "cat; echo done", time.Minute)
	if out != "done\n" {
		t.Errorf("stdin: %q", out)
	}
	r := call(t, tb, ToolShell, map[string]any{"command": "sleep 5", "timeout_seconds": 1})
	if r.ExitCode == nil || *r.ExitCode != ExitTimeout || !strings.Contains(r.Error, "timed out after 1s") {
		t.Errorf("shell tool timeout: %+v", r)
	}
	if !strings.HasPrefix(r.Text(), "exit_code: 124\nerror: command timed out") {
		t.Errorf("text for the model = %q", r.Text())
	}
}

func TestSystemPrompt(t *testing.T) {
	tb, ws := newToolbox(t)
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "SOUL.md"), []byte("I am Pip, a careful helper."), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "MEMORY.md"), []byte("The user likes tea."), 0o644))
	testutil.Must(t, os.MkdirAll(filepath.Join(ws, "skills", "deploy"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "skills", "deploy", "SKILL.md"), []byte("How to deploy."), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "skills", "brew.md"), []byte(strings.Repeat("b", maxSkillBytes+10)), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "skills", "notes.txt"), []byte("not a skill"), 0o644))
	outside := filepath.Join(t.TempDir(), "evil.md")
	testutil.Must(t, os.WriteFile(outside, []byte("OUTSIDE TEXT"), 0o644))
	testutil.Must(t, os.Symlink(outside, filepath.Join(ws, "skills", "evil.md")))

	p := SystemPrompt(tb.Root(), ws)
	for _, want := range []string{"I am Pip", "The user likes tea.", "## deploy (skills/deploy/SKILL.md)", "How to deploy.", "## brew (skills/brew.md)", "[cut at 4096 bytes]", ws} {
		if !strings.Contains(p, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
	for _, bad := range []string{"OUTSIDE TEXT", "not a skill", strings.Repeat("b", maxSkillBytes+1)} {
		if strings.Contains(p, bad) {
			t.Errorf("prompt contains %q", bad[:min(len(bad), 20)])
		}
	}
	if strings.Index(p, "## brew") > strings.Index(p, "## deploy") {
		t.Error("skills are not sorted by name")
	}
}

func TestShellKillsLeftoverProcesses(t *testing.T) {
	tb, _ := newToolbox(t)
	out, code, err := tb.Shell(context.Background(), "sleep 60 >/dev/null 2>&1 & echo $!", time.Minute)
	if err != nil || code != 0 {
		t.Fatalf("%q %d %v", out, code, err)
	}
	pid := strings.TrimSpace(out)
	for i := 0; ; i++ {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		// Gone, or a zombie waiting for its new parent to reap it.
		if err != nil || strings.Contains(string(stat), ") Z ") {
			break
		}
		if i == 100 {
			t.Fatalf("background sleep %s still runs after the command: %s", pid, stat)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A child that holds the output pipe does not hold the loop either.
	out, code, err = tb.Shell(context.Background(), "sleep 60 & echo bg", time.Minute)
	if err != nil || code != 0 || out != "bg\n" {
		t.Errorf("pipe-holding child: %q %d %v", out, code, err)
	}
}

func TestToolCallsPerStepBound(t *testing.T) {
	ws := t.TempDir()
	var uses []ToolUse
	for i := range maxToolCallsPerStep + 2 {
		uses = append(uses, ToolUse{ID: "c" + string(rune('a'+i)), Name: ToolListFiles, Input: json.RawMessage(`{}`)})
	}
	c := &scripted{next: func(n int, _ Completion) (Answer, error) {
		if n == 1 {
			return Answer{ToolCalls: uses}, nil
		}
		return Answer{Text: "ok"}, nil
	}}
	req := offlineReq("many")
	rep := Run(context.Background(), &req, Options{Workspace: ws, Client: c})
	results := c.calls[1].Messages[len(c.calls[1].Messages)-1].ToolResults
	if rep.Reply != "ok" || len(results) != len(uses) {
		t.Fatalf("reply %q, %d results for %d calls", rep.Reply, len(results), len(uses))
	}
	if results[maxToolCallsPerStep-1].IsError() || !strings.Contains(results[maxToolCallsPerStep].Error, "not run") {
		t.Errorf("results around the bound: %+v %+v", results[maxToolCallsPerStep-1], results[maxToolCallsPerStep])
	}
}

// A FIFO in the workspace (the agent can make one with its shell) must not
// block the loop: neither as SOUL.md in the prompt nor through read_file.
func TestFIFOsDoNotBlock(t *testing.T) {
	tb, ws := newToolbox(t)
	for _, name := range []string{"SOUL.md", "pipe"} {
		if err := syscall.Mkfifo(filepath.Join(ws, name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan ToolResult, 1)
	go func() {
		SystemPrompt(tb.Root(), ws)
		done <- call(t, tb, ToolReadFile, map[string]any{"path": "pipe"})
	}()
	select {
	case res := <-done:
		if !strings.Contains(res.Error, "not a regular file") {
			t.Errorf("read_file on a FIFO: %+v", res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("reading a FIFO blocked the agent loop")
	}
}
