package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

const testAPIKey = "sk-meepa-test-4f1c9e2a77"

// runToken keeps agent ids apart when several checkouts run these tests on
// one daemon at once: a runner removes every container of its agent id
// that it did not make.
var runToken = newMessageID()[4:10]

// DefaultPidsLimitForTest is the pids limit the test agents get (the default).
const DefaultPidsLimitForTest = agentspec.DefaultPidsLimit

// liveAgent is a runner served on a unix socket, with real per-message
// containers of the test runner image.
type liveAgent struct {
	cfg    *agentspec.Config
	srv    *Server
	client *http.Client
}

func testAgentConfig(t *testing.T, cli *client.Client, id string) *agentspec.Config {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "meepa-sock-")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove "+sockDir, func() error { return os.RemoveAll(sockDir) })
	return &agentspec.Config{
		AgentID:   "tf-acc-" + id + "-" + runToken,
		Workspace: t.TempDir(),
		Listen:    "unix://" + filepath.Join(sockDir, "runner.sock"),
		Token:     "test-token-" + id,
		QueueSize: 32,
		Container: agentspec.ContainerMode{
			Enabled:        true,
			Image:          testutil.EnsureRunnerImage(t, cli),
			MemoryLimit:    agentspec.SizeOf(512 << 20),
			TimeoutSeconds: 60,
			Network:        "none",
			Prestart:       true,
		},
		LLM:           agentspec.LLMConfig{Provider: "offline", APIKey: testAPIKey},
		Secrets:       map[string]string{"EXTRA": "xsecret-0d9b1f"},
		RedactSecrets: true,
	}
}

func startAgent(t *testing.T, cfg *agentspec.Config) *liveAgent {
	t.Helper()
	return startAgentWith(t, cfg, nil)
}

// startAgentWith starts a runner whose sandboxes come from newBackend (nil:
// the config's own).
func startAgentWith(t *testing.T, cfg *agentspec.Config, newBackend BackendFactory) *liveAgent {
	t.Helper()
	log := hclog.New(&hclog.LoggerOptions{Name: "runner", Level: hclog.Warn, Output: testWriter{t}})
	srv, err := New(context.Background(), cfg, Options{Logger: log, NewBackend: newBackend})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := srv.Serve(ln); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &liveAgent{cfg: cfg, srv: srv, client: unixClient(cfg.Listen)}
}

func unixClient(listen string) *http.Client {
	path := strings.TrimPrefix(listen, "unix://")
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

type answer struct {
	status    int
	reply     string
	kind      string
	messageID string
	raw       []byte
}

func (a *liveAgent) send(t *testing.T, text string) answer {
	t.Helper()
	body, _ := json.Marshal(MessageRequest{Text: text})
	req, _ := http.NewRequest(http.MethodPost, "http://runner/v1/messages", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+a.cfg.Token)
	resp, err := a.client.Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	var m struct {
		Reply string      `json:"reply"`
		Error ErrorDetail `json:"error"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("answer %d %q: %v", resp.StatusCode, raw, err)
	}
	return answer{resp.StatusCode, m.Reply, m.Error.Kind, resp.Header.Get("X-Message-Id"), raw}
}

// sh runs a command through the offline provider's shell tool and returns
// its exit code and output, failing the test on anything but a reply.
func (a *liveAgent) sh(t *testing.T, cmd string) (int, string) {
	t.Helper()
	ans := a.send(t, "!sh "+cmd)
	if ans.status != 200 {
		t.Fatalf("%q: status %d %s", cmd, ans.status, ans.raw)
	}
	head, out, _ := strings.Cut(ans.reply, "\n")
	code, err := strconv.Atoi(strings.TrimPrefix(head, "exit "))
	if err != nil {
		t.Fatalf("%q: reply %q", cmd, ans.reply)
	}
	return code, out
}

func (a *liveAgent) waitReady(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !a.srv.backend.Ready(); {
		if time.Now().After(deadline) {
			t.Fatal("no prestarted container became ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func containersOf(t *testing.T, cli *client.Client, agentID string, extra ...filters.KeyValuePair) []container.Summary {
	t.Helper()
	f := sandbox.OrphanFilter(agentID)
	for _, kv := range extra {
		f.Add(kv.Key, kv.Value)
	}
	list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// noSecretInInspect checks the full `docker inspect` of every container of
// the agent (the waiting prestarted one among them) for the API key and
// the secret.
func noSecretInInspect(t *testing.T, cli *client.Client, agentID string) {
	t.Helper()
	list := containersOf(t, cli, agentID)
	if len(list) == 0 {
		t.Fatal("no container of the agent to inspect")
	}
	inspected := 0
	for _, c := range list {
		_, raw, err := cli.ContainerInspectWithRaw(context.Background(), c.ID, false)
		if cerrdefs.IsNotFound(err) {
			continue // the last message's container, removed since the list
		}
		if err != nil {
			t.Fatal(err)
		}
		inspected++
		if bytes.Contains(raw, []byte(testAPIKey)) || bytes.Contains(raw, []byte("xsecret-0d9b1f")) {
			t.Errorf("secret in docker inspect of %s", c.ID[:12])
		}
	}
	if inspected == 0 {
		t.Fatal("every container of the agent was gone before it could be inspected")
	}
}

// waitGone waits for containers matching the filter to be removed; removal
// of a finished container runs just after its reply.
func waitGone(t *testing.T, cli *client.Client, agentID string, extra ...filters.KeyValuePair) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		left := containersOf(t, cli, agentID, extra...)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("containers not removed: %+v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Everything the hardened container promises, checked from inside a real
// per-message container through the offline provider's shell tool. Every
// probe is followed by one that must work, so a sandbox that broke on the
// previous message shows up.
func TestContainerIsolationFromInside(t *testing.T) { containerIsolationFromInside(t, "") }

// The same promises under gVisor (container_mode.runtime = "runsc").
func TestContainerIsolationFromInsideRunsc(t *testing.T) { containerIsolationFromInside(t, "runsc") }

func containerIsolationFromInside(t *testing.T, runtime string) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	if runtime != "" {
		testutil.RequireRuntime(t, cli, runtime)
	}
	cfg := testAgentConfig(t, cli, "inside"+runtime)
	cfg.Container.Runtime = runtime
	a := startAgent(t, cfg)

	alive := func(t *testing.T) {
		t.Helper()
		if code, out := a.sh(t, "echo alive"); code != 0 || strings.TrimSpace(out) != "alive" {
			t.Fatalf("next message: exit %d %q", code, out)
		}
	}

	t.Run("rootfs read-only", func(t *testing.T) {
		for _, p := range []string{"/x", "/usr/local/bin/agent-runner", "/etc/passwd", "/dev/shm/x"} {
			if code, out := a.sh(t, "echo x > "+p); code == 0 {
				t.Errorf("write to %s succeeded: %q", p, out)
			}
		}
		alive(t)
	})
	t.Run("workspace and tmp writable, tmp capped at 256 MB", func(t *testing.T) {
		code, out := a.sh(t, "echo w > /workspace/w && echo t > /tmp/t && id -u && echo $HOME $TMPDIR $PWD")
		if code != 0 || !strings.Contains(out, strconv.Itoa(agentspec.AgentUID(cfg.AgentID))) || !strings.Contains(out, "/workspace /tmp /workspace") {
			t.Fatalf("exit %d %q", code, out)
		}
		_, out = a.sh(t, "dd if=/dev/zero of=/tmp/big bs=1M count=300 2>&1; echo dd=$?; stat -c %s /tmp/big; rm /tmp/big")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		size, _ := strconv.ParseInt(lines[len(lines)-1], 10, 64)
		if !strings.Contains(out, "dd=1") || size == 0 || size > 256<<20 {
			t.Errorf("dd of 300 MB into /tmp: %q (size %d)", out, size)
		}
		alive(t)
	})
	t.Run("no capabilities", func(t *testing.T) {
		for _, cmd := range []string{
			"mount -t tmpfs none /tmp",
			"chown 0:0 /workspace/w",
			"arping -c 1 -w 1 -I lo 127.0.0.1",
			// Exit 7 is the proof: no capability even in the bounding set,
			// and no-new-privileges set on the process.
			"grep -q '^CapBnd:[[:space:]]*0000000000000000$' /proc/self/status && exit 7 || exit 0",
			"grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status && exit 7 || exit 0",
		} {
			if code, out := a.sh(t, cmd); code == 0 {
				t.Errorf("%q succeeded: %q", cmd, out)
			}
		}
		alive(t)
	})
	t.Run("pids limit stops a fork flood", func(t *testing.T) {
		// An inner shell spawns sleepers until fork fails (which ends it),
		// counting them in a file; the outer shell reads the count with
		// builtins only, since nothing can fork until the sleepers exit.
		flood := `sh -c 'i=0; while :; do sleep 2 </dev/null >/dev/null 2>&1 & i=$((i+1)); echo $i > /tmp/n; done' 2>/dev/null; read n < /tmp/n; echo spawned=$n`
		if runtime == "runsc" {
			// gVisor's kernel applies no pids limit of its own: the limit
			// is on the host's tasks of the sandbox (the Sentry's threads,
			// the gofer, one systrap stub per process), so the flood ends
			// the whole sandbox (its Go kernel cannot make a thread: exit
			// 2) instead of failing a fork inside (docs/guides/gvisor.md).
			if ans := a.send(t, "!sh "+flood); ans.status != 500 || ans.kind != agent.ErrKindExit {
				t.Errorf("fork flood under gVisor: %d %s, want the sandbox ended (500 exit)", ans.status, ans.raw)
			}
			alive(t)
			return
		}
		code, out := a.sh(t, flood)
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(out), "spawned=%d", &n); code != 0 || err != nil || n >= DefaultPidsLimitForTest || n < 100 {
			t.Errorf("exit %d %q: want the flood stopped under %d processes", code, out, DefaultPidsLimitForTest)
		}
		alive(t)
	})
	t.Run("memory bomb is OOM", func(t *testing.T) {
		ans := a.send(t, "!sh tail /dev/zero")
		if ans.status != 500 || ans.kind != agent.ErrKindOOM {
			t.Errorf("memory bomb: %d %s", ans.status, ans.raw)
		}
		alive(t)
	})
	t.Run("network none reaches nothing", func(t *testing.T) {
		// /proc/net/dev lists the interfaces on both runtimes (gVisor's
		// /sys has no class/net); nc fails cleanly where busybox's wget
		// segfaulted (under gVisor, and in a plain container of this image).
		code, out := a.sh(t, "cat /proc/net/route | wc -l; tail -n +3 /proc/net/dev | cut -d: -f1; nc -w 2 172.17.0.1 80 </dev/null 2>&1; echo nc=$?")
		if code != 0 || !strings.HasPrefix(out, "1\n") || strings.TrimSpace(strings.Split(out, "\n")[1]) != "lo" || !strings.Contains(out, "nc=1") {
			t.Errorf("network none: exit %d %q", code, out)
		}
		alive(t)
	})
	t.Run("api key only on stdin", func(t *testing.T) {
		code, out := a.sh(t, "env; cat /proc/1/environ | tr '\\0' '\\n'")
		if code != 0 || strings.Contains(out, testAPIKey) || strings.Contains(out, "xsecret-0d9b1f") || !strings.Contains(out, "HOME=/workspace") {
			t.Errorf("environment: exit %d %q", code, out)
		}
		a.waitReady(t)
		noSecretInInspect(t, cli, cfg.AgentID)
		// The key must not be in any file the agent left, memory.db included.
		testutil.Must(t, filepath.WalkDir(cfg.Workspace, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, _ := os.ReadFile(p)
			if bytes.Contains(data, []byte(testAPIKey)) || bytes.Contains(data, []byte("xsecret-0d9b1f")) {
				t.Errorf("secret in workspace file %s", p)
			}
			return nil
		}))
		if _, err := os.Stat(filepath.Join(cfg.Workspace, agent.MemoryFile)); err != nil {
			t.Errorf("no memory.db in the workspace: %v", err)
		}
		alive(t)
	})
}

// A message that outlives timeout_seconds is killed, its container
// removed, and the answer is 504 timeout; the next message works.
func TestTimeoutKillsAndRemoves(t *testing.T) { timeoutKillsAndRemoves(t, "") }

// The same under gVisor, cold (not prestarted).
func TestTimeoutKillsAndRemovesRunsc(t *testing.T) { timeoutKillsAndRemoves(t, "runsc") }

func timeoutKillsAndRemoves(t *testing.T, runtime string) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	if runtime != "" {
		testutil.RequireRuntime(t, cli, runtime)
	}
	cfg := testAgentConfig(t, cli, "timeout"+runtime)
	cfg.Container.Runtime = runtime
	cfg.Container.TimeoutSeconds = 2
	cfg.Container.Prestart = false // so the container carries the message id
	a := startAgent(t, cfg)
	ans := a.send(t, "!sh sleep 50")
	if ans.status != 504 || ans.kind != agent.ErrKindTimeout || ans.messageID == "" {
		t.Fatalf("timeout: %d %s", ans.status, ans.raw)
	}
	waitGone(t, cli, cfg.AgentID, filters.Arg("label", sandbox.LabelMessage+"="+ans.messageID))
	if code, out := a.sh(t, "echo next"); code != 0 || strings.TrimSpace(out) != "next" {
		t.Fatalf("next message: %d %q", code, out)
	}
}

// 20 concurrent messages to one agent never run two of its containers at
// once (each takes a lock directory in the workspace, and fails if it is
// held), while a second agent's messages run at the same time as the
// first's (kernel uptime stamps from inside prove the overlap).
func TestPerAgentSerializationAgentsInParallel(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	a := startAgent(t, testAgentConfig(t, cli, "serial-a"))
	b := startAgent(t, testAgentConfig(t, cli, "serial-b"))
	const probe = `mkdir /workspace/lock || exit 99; read s _ </proc/uptime; sleep 0.2; read e _ </proc/uptime; rmdir /workspace/lock; echo "$s $e"`

	type span struct{ s, e float64 }
	var mu sync.Mutex
	spans := map[*liveAgent][]span{}
	var wg sync.WaitGroup
	run := func(ag *liveAgent) {
		defer wg.Done()
		code, out := ag.sh(t, probe)
		if code != 0 {
			t.Errorf("%s: exit %d %q (99: another container of the agent held the lock)", ag.cfg.AgentID, code, out)
			return
		}
		var sp span
		if _, err := fmt.Sscanf(out, "%f %f", &sp.s, &sp.e); err != nil {
			t.Errorf("stamps %q: %v", out, err)
			return
		}
		mu.Lock()
		spans[ag] = append(spans[ag], sp)
		mu.Unlock()
	}
	for range 20 {
		wg.Add(1)
		go run(a)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 6 {
			wg.Add(1)
			run(b)
		}
	}()
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(spans[a]) != 20 || len(spans[b]) != 6 {
		t.Fatalf("ran %d and %d messages", len(spans[a]), len(spans[b]))
	}
	overlapping := func(x, y span) bool { return x.s < y.e && y.s < x.e }
	for i, x := range spans[a] {
		for _, y := range spans[a][i+1:] {
			if overlapping(x, y) {
				t.Errorf("two messages of one agent overlapped: %v %v", x, y)
			}
		}
	}
	across := 0
	for _, x := range spans[a] {
		for _, y := range spans[b] {
			if overlapping(x, y) {
				across++
			}
		}
	}
	if across == 0 {
		t.Errorf("no message of agent b ran while one of agent a did: a=%v b=%v", spans[a], spans[b])
	}
}

// With credential injection and a secret, the tools see neither: no
// secret reaches a sandbox, and the API key is never handed to it at all
// (the offline provider has no relay, so tools get no credential); none
// is in `docker inspect` either.
func TestInjectedCredentialsRedactedAndNotInInspect(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	cfg := testAgentConfig(t, cli, "inject")
	cfg.InjectCredentialsEnv = true
	a := startAgent(t, cfg)
	code, out := a.sh(t, `test -z "$MEEPA_LLM_API_KEY" && echo key-absent; test -z "$EXTRA" && echo secret-absent; env`)
	if code != 0 || !strings.Contains(out, "key-absent") || !strings.Contains(out, "secret-absent") {
		t.Fatalf("tool env: exit %d %q", code, out)
	}
	if strings.Contains(out, testAPIKey) || strings.Contains(out, "xsecret-0d9b1f") {
		t.Errorf("a value reached the tools: %q", out)
	}
	a.waitReady(t)
	noSecretInInspect(t, cli, cfg.AgentID)
}
