package main

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// agentRun pipes stdin through `agent-runner agent-run args...` with a
// clean environment whose HOME is home, and decodes the one Reply on stdout.
func agentRun(t *testing.T, bin, home, stdin string, cred *syscall.Credential, args ...string) (agent.Reply, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"agent-run"}, args...)...)
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=" + os.TempDir()}
	cmd.Dir = "/"
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("run agent-run: %v", err)
		}
		code = ee.ExitCode()
	}
	var rep agent.Reply
	dec := json.NewDecoder(&stdout)
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stdout is not a Reply: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if rest, _ := io.ReadAll(dec.Buffered()); strings.TrimSpace(string(rest)) != "" || stdout.Len() != 0 {
		t.Errorf("stdout holds more than one Reply: %q", rest)
	}
	return rep, code
}

func request(t *testing.T, r agent.Request) string {
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAgentRunBinaryIsStatic(t *testing.T) {
	f, err := elf.Open(testutil.RunnerBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("agent-runner has an ELF interpreter: it is dynamically linked (cgo crept in?)")
		}
	}
}

func TestAgentRunOffline(t *testing.T) {
	bin := testutil.RunnerBinary(t)
	ws := t.TempDir()
	const key = "sk-e2e-secret-31337"
	req := agent.Request{
		AgentID:              "a1",
		Message:              agent.Message{ID: "m1", Text: "!sh echo hello > greeting.txt && cat greeting.txt && echo \"$MEEPA_LLM_API_KEY\" && pwd"},
		LLM:                  agentspec.LLMConfig{Provider: agentspec.ProviderOffline, APIKey: key},
		InjectCredentialsEnv: true,
		RedactSecrets:        true,
	}
	rep, code := agentRun(t, bin, ws, request(t, req), nil)
	if code != 0 || rep.ErrorKind != "" {
		t.Fatalf("exit %d, %s: %s", code, rep.ErrorKind, rep.Error)
	}
	if want := "exit 0\nhello\n" + redact.Redacted + "\n" + ws + "\n"; rep.Reply != want || rep.MessageID != "m1" {
		t.Errorf("reply = %q, want %q", rep.Reply, want)
	}
	if _, err := os.Stat(filepath.Join(ws, agent.MemoryFile)); err != nil {
		t.Errorf("memory.db: %v", err)
	}

	// --workspace wins over HOME.
	other := t.TempDir()
	req.Message.Text = "!sh pwd"
	rep, _ = agentRun(t, bin, ws, request(t, req), nil, "--workspace", other)
	if rep.Reply != "exit 0\n"+other+"\n" {
		t.Errorf("--workspace: reply %q", rep.Reply)
	}

	// A malformed request still gets a Reply and exit 0.
	rep, code = agentRun(t, bin, ws, `{"message": 42}`, nil)
	if code != 0 || rep.ErrorKind != agent.ErrKindRequest {
		t.Errorf("malformed: exit %d, %q %q", code, rep.ErrorKind, rep.Error)
	}

	for _, dir := range []string{ws, other} {
		testutil.Must(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(key)) {
					t.Errorf("key on disk in %s", p)
				}
			}
			return nil
		}))
	}
}

// agent-run refuses io_uring to its tools on its own, with nothing around
// it: here it runs straight on the host, under no runtime's profile at all.
// The control: the same probe started by the test gets its io_uring.
func TestAgentRunToolsGetNoIOURing(t *testing.T) {
	bin := testutil.RunnerBinary(t)
	ws := t.TempDir()
	probe := filepath.Join(ws, "uring-probe")
	testutil.Must(t, os.WriteFile(probe, testutil.URingProbe(t), 0o755))
	out, err := exec.Command(probe).CombinedOutput()
	if err != nil {
		t.Fatalf("control: the probe outside agent-run: %v, %s (a kernel without io_uring shows nothing here)", err, out)
	}
	req := agent.Request{AgentID: "a1", Message: agent.Message{ID: "m1", Text: "!sh " + probe}, LLM: agentspec.LLMConfig{Provider: agentspec.ProviderOffline}}
	rep, code := agentRun(t, bin, ws, request(t, req), nil)
	if code != 0 || rep.ErrorKind != "" {
		t.Fatalf("exit %d, %s: %s", code, rep.ErrorKind, rep.Error)
	}
	if !strings.HasPrefix(rep.Reply, "exit 13\n") && !strings.HasPrefix(rep.Reply, "exit 38\n") {
		t.Errorf("a tool of agent-run: %q, want exit 13 (EPERM) or 38 (ENOSYS)", rep.Reply)
	}
}

func TestAgentRunOpenAIThroughBinary(t *testing.T) {
	bin := testutil.RunnerBinary(t)
	const key = "sk-e2e-openai-4242"
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer "+key {
			t.Errorf("request %s with auth %q", r.URL.Path, r.Header.Get("Authorization"))
		}
		w.Header().Set("Content-Type", "application/json")
		msg := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"shell","arguments":"{\"command\":\"echo $OPENAI_API_KEY\"}"}}]}`
		if calls > 1 {
			body, _ := io.ReadAll(r.Body)
			if !strings.Contains(string(body), `exit_code: 0\n[REDACTED]`) {
				t.Errorf("tool result not sent back redacted: %s", body)
			}
			msg = `{"role":"assistant","content":"the tool printed ` + key + `"}`
		}
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":`+msg+`}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`)
	}))
	defer srv.Close()
	ws := t.TempDir()
	rep, code := agentRun(t, bin, ws, request(t, agent.Request{
		Message:              agent.Message{ID: "m1", Text: "show the key"},
		LLM:                  agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "m", BaseURL: srv.URL + "/v1", APIKey: key},
		InjectCredentialsEnv: true,
		RedactSecrets:        true,
	}), nil)
	if code != 0 || rep.Reply != "the tool printed "+redact.Redacted || calls != 2 {
		t.Fatalf("exit %d, reply %q (%s: %s), %d calls", code, rep.Reply, rep.ErrorKind, rep.Error, calls)
	}
	if out := rep.Steps[0].ToolCalls[0].Output; out != redact.Redacted+"\n" {
		t.Errorf("tool output %q", out)
	}
	if rep.Usage != (agent.Usage{InputTokens: 6, OutputTokens: 8}) {
		t.Errorf("usage %+v", rep.Usage)
	}
}

func TestAgentRunSIGTERMStillReplies(t *testing.T) {
	bin := testutil.RunnerBinary(t)
	ws := t.TempDir()
	cmd := exec.Command(bin, "agent-run", "--workspace", ws)
	cmd.Stdin = strings.NewReader(request(t, agent.Request{
		Message: agent.Message{ID: "m1", Text: "!sh touch started; sleep 60"},
		LLM:     agentspec.LLMConfig{Provider: agentspec.ProviderOffline},
	}))
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
			break
		}
		if i > 300 {
			_ = cmd.Process.Kill() // failing anyway
			t.Fatal("the shell never started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	testutil.Must(t, cmd.Process.Signal(syscall.SIGTERM))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent-run after SIGTERM: %v", err)
	}
	var rep agent.Reply
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("no reply after SIGTERM: %v: %q", err, stdout.String())
	}
	if rep.ErrorKind != agent.ErrKindInternal || !strings.Contains(rep.Error, "cancelled") {
		t.Errorf("reply after SIGTERM: %q %q", rep.ErrorKind, rep.Error)
	}
}

// TestAgentRunOtherUID runs agent-run as nobody: a workspace it cannot
// write is a workspace error, one it owns works and its memory.db is
// nobody's.
func TestAgentRunOtherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run agent-run as another uid")
	}
	// RunnerBinary's directory is private to root; nobody needs to exec it.
	dir, err := os.MkdirTemp("", "meepa-test-agentrun-")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove "+dir, func() error { return os.RemoveAll(dir) })
	testutil.Must(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "agent-runner")
	data, err := os.ReadFile(testutil.RunnerBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	ws := filepath.Join(dir, "ws")
	testutil.Must(t, os.Mkdir(ws, 0o755))
	req := request(t, agent.Request{Message: agent.Message{ID: "m1", Text: "!sh id -u"}, LLM: agentspec.LLMConfig{Provider: agentspec.ProviderOffline}})

	rep, code := agentRun(t, bin, ws, req, nobody)
	if code != 0 || rep.ErrorKind != agent.ErrKindWorkspace || !strings.Contains(rep.Error, "not writable by uid 65534") {
		t.Fatalf("root-owned workspace: exit %d, %q %q", code, rep.ErrorKind, rep.Error)
	}

	if err := os.Chown(ws, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	rep, _ = agentRun(t, bin, ws, req, nobody)
	if rep.ErrorKind != "" || rep.Reply != "exit 0\n65534\n" {
		t.Fatalf("nobody-owned workspace: %q (%s: %s)", rep.Reply, rep.ErrorKind, rep.Error)
	}
	st, err := os.Stat(filepath.Join(ws, agent.MemoryFile))
	if err != nil || st.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Errorf("memory.db: %v, owner %v", err, st)
	}

	// A memory.db left by another uid and not writable is reported, not
	// silently opened read-only.
	testutil.Must(t, os.Chown(filepath.Join(ws, agent.MemoryFile), 0, 0))
	testutil.Must(t, os.Chmod(filepath.Join(ws, agent.MemoryFile), 0o644))
	rep, _ = agentRun(t, bin, ws, req, nobody)
	if rep.ErrorKind != agent.ErrKindWorkspace || !strings.Contains(rep.Error, "memory.db is not writable") {
		t.Errorf("root-owned memory.db: %q %q", rep.ErrorKind, rep.Error)
	}
}
