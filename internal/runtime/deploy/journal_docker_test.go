package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// journalAgent is a container-mode agent deployed by the service, whose
// runner container Docker restarts (unless-stopped).
type journalAgent struct {
	t     *testing.T
	cli   *client.Client
	id    string
	token string
	sock  string
	ws    string
	cid   string
	// journal is the runner's journal directory on the host.
	journal string
}

// deployJournalAgent deploys agent id; edit, when given, changes the agent
// before it is applied.
func deployJournalAgent(t *testing.T, id string, edit ...func(*agentspec.Agent)) *journalAgent {
	t.Helper()
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	svc := NewService(Options{StateDir: t.TempDir(), Version: "test", Logger: &recordingLogger{},
		Docker: func(context.Context) (client.APIClient, error) { return cli, nil }, HealthTimeout: time.Minute})
	testutil.Cleanup(t, "remove runner "+id, func() error { return Remove(context.Background(), cli, id, time.Second) })
	a := agentspec.Agent{
		Config: agentspec.Config{
			AgentID: id,
			Container: agentspec.ContainerMode{Enabled: true, Image: image, MemoryLimit: agentspec.SizeOf(64 << 20), TimeoutSeconds: 30, Network: "none",
				PidsLimit: 64, Runtime: agentspec.DefaultRuntime, Prestart: true},
			LLM:      agentspec.LLMConfig{Provider: "offline"},
			MaxSteps: agentspec.DefaultMaxSteps,
		},
		Meta: agentspec.Meta{Soul: "test", Deployment: agentspec.ModeContainer},
	}
	for _, e := range edit {
		e(&a)
	}
	out, err := svc.Apply(context.Background(), a, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	return &journalAgent{t: t, cli: cli, id: id, token: out.Token, sock: svc.Layout(id).Socket,
		ws: svc.WorkspacePath(id), cid: out.RunnerContainerID, journal: svc.Layout(id).JournalDir}
}

// sent is what a caller saw of one message.
type sent struct {
	code     int
	id       string
	replayed bool
	body     []byte
	err      error
}

func (s sent) kind() string {
	var eb runner.ErrorBody
	_ = json.Unmarshal(s.body, &eb)
	return eb.Error.Kind
}

func (s sent) reply() string {
	var r struct {
		Reply string `json:"reply"`
	}
	_ = json.Unmarshal(s.body, &r)
	return r.Reply
}

// post sends one message; async adds wait=false.
func (a *journalAgent) post(key, text string, async bool) sent {
	c, base := Listener{Unix: a.sock}.Client(2 * time.Minute)
	u := base + "/v1/messages"
	if async {
		u += "?wait=false"
	}
	body, _ := json.Marshal(map[string]string{"text": text})
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return sent{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if key != "" {
		req.Header.Set(runner.IdempotencyKeyHeader, key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return sent{err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	return sent{code: resp.StatusCode, id: resp.Header.Get("X-Message-Id"),
		replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: raw, err: err}
}

// get reads GET /v1/messages/{id}.
func (a *journalAgent) get(id string) (int, runner.AsyncStatus, error) {
	c, base := Listener{Unix: a.sock}.Client(30 * time.Second)
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/messages/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := c.Do(req)
	if err != nil {
		return 0, runner.AsyncStatus{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	var st runner.AsyncStatus
	err = json.NewDecoder(resp.Body).Decode(&st)
	return resp.StatusCode, st, err
}

// waitDone polls id until it is done.
func (a *journalAgent) waitDone(id string) runner.AsyncStatus {
	a.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, st, err := a.get(id)
		if err == nil && code == http.StatusOK && st.State == runner.StateDone {
			return st
		}
		if err == nil && code != http.StatusOK {
			a.t.Fatalf("GET %s: %d", id, code)
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("%s not done after 2 minutes: %d %+v %v", id, code, st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metric reads one meepa_runner_* value from /metrics.
func (a *journalAgent) metric(name string) int {
	a.t.Helper()
	c, base := Listener{Unix: a.sock}.Client(30 * time.Second)
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		a.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^meepa_runner_` + name + ` ([0-9]+)$`).FindSubmatch(raw)
	if m == nil {
		a.t.Fatalf("no %s in /metrics:\n%s", name, raw)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// runnerState is the runner container's process id and restart count.
func (a *journalAgent) runnerState() (pid, restarts int, running bool) {
	a.t.Helper()
	c, err := a.cli.ContainerInspect(context.Background(), a.cid)
	if err != nil {
		a.t.Fatal(err)
	}
	return c.State.Pid, c.RestartCount, c.State.Running
}

// waitBack waits for the runner to run again as a process other than
// oldPID, and to answer /healthz.
func (a *journalAgent) waitBack(oldPID int) {
	a.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if pid, _, running := a.runnerState(); running && pid != oldPID && pid != 0 {
			break
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("the runner did not come back:\n%s", LogTail(context.Background(), a.cli, a.cid, 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := WaitHealthy(context.Background(), a.cli, a.cid, Listener{Unix: a.sock}, time.Minute); err != nil {
		a.t.Fatal(err)
	}
}

// lines counts the lines of a workspace file by content.
func (a *journalAgent) lines(name string) map[string]int {
	a.t.Helper()
	raw, err := os.ReadFile(filepath.Join(a.ws, name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		a.t.Fatal(err)
	}
	n := map[string]int{}
	for _, l := range strings.Fields(string(raw)) {
		n[l]++
	}
	return n
}

// appendCmd is a message whose shell command appends tag to file, then
// takes a while, so that a kill finds messages waiting and one running.
func appendCmd(file, tag string) string {
	return fmt.Sprintf("!sh echo %s >> %s; sleep 0.3", tag, file)
}

func okShell(s sent) bool {
	return s.code == http.StatusOK && strings.HasPrefix(s.reply(), "exit 0")
}

// The runner killed with SIGKILL in the middle of a burst of 16 keyed
// messages, and restarted by Docker: every accepted message ends answered
// or reported interrupted (asked for by its key after the restart), at
// most one (the one running) is interrupted, and none runs twice (each
// appends a line to a workspace file: answered ones exactly once,
// interrupted ones at most once).
func TestJournalRunnerKilledMidBurst(t *testing.T) {
	a := deployJournalAgent(t, "meepa-test-journal-kill")
	const n = 16
	first := make([]sent, n)
	var wg sync.WaitGroup
	answered := make(chan int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first[i] = a.post(fmt.Sprintf("burst-%02d", i), appendCmd("burst.log", fmt.Sprintf("m%02d", i)), false)
			if first[i].err == nil {
				answered <- i
			}
		}()
		time.Sleep(5 * time.Millisecond) // acceptance in i's order, mostly
	}
	for range 3 {
		<-answered
	}
	pid, restarts, _ := a.runnerState()
	testutil.Must(t, syscall.Kill(pid, syscall.SIGKILL))
	killed := time.Now()
	wg.Wait()
	a.waitBack(pid)
	if _, r, _ := a.runnerState(); r <= restarts {
		t.Errorf("restart count %d after the kill, was %d", r, restarts)
	}
	t.Logf("runner back %s after SIGKILL", time.Since(killed).Round(10*time.Millisecond))

	counts := map[string]int{}
	final := make([]sent, n)
	for i := range n {
		final[i] = a.post(fmt.Sprintf("burst-%02d", i), appendCmd("burst.log", fmt.Sprintf("m%02d", i)), false)
		counts[classify(t, i, first[i], final[i])]++
	}
	ran := a.lines("burst.log")
	for i := range n {
		tag := fmt.Sprintf("m%02d", i)
		switch {
		case okShell(final[i]) && ran[tag] != 1:
			t.Errorf("message %d answered but ran %d times", i, ran[tag])
		case final[i].kind() == runner.KindInterrupted && ran[tag] > 1:
			t.Errorf("message %d interrupted and ran %d times", i, ran[tag])
		}
	}
	if counts["interrupted"] > 1 {
		t.Errorf("%d messages interrupted; one runs at a time", counts["interrupted"])
	}
	if counts["answered before the kill"] == n {
		t.Error("the kill came after the burst: nothing was tested")
	}
	t.Logf("burst of %d, SIGKILL after 3 replies: %v; after the restart resumed_total=%d interrupted_total=%d",
		n, counts, a.metric("resumed_total"), a.metric("interrupted_total"))
}

// classify checks message i's fate: what its caller saw first, and what
// its key answered after the restart.
func classify(t *testing.T, i int, first, final sent) string {
	t.Helper()
	if !final.replayed || final.err != nil {
		t.Errorf("message %d: the key was unknown after the restart (%d %v %s): an accepted message was lost", i, final.code, final.err, final.body)
	}
	switch {
	case first.err == nil && first.code != http.StatusOK:
		t.Errorf("message %d refused: %d %s", i, first.code, first.body)
		return "refused"
	case first.err == nil:
		if final.id != first.id || !bytes.Equal(final.body, first.body) {
			t.Errorf("message %d: answered %s %s, its key after the restart %s %s", i, first.id, first.body, final.id, final.body)
		}
		return "answered before the kill"
	case okShell(final):
		return "answered after the restart"
	case final.code == http.StatusInternalServerError && final.kind() == runner.KindInterrupted:
		return "interrupted"
	}
	t.Errorf("message %d: after the restart %d %s", i, final.code, final.body)
	return "other"
}

// Asynchronous messages outlive a runner restart (docker restart: SIGTERM,
// the message in flight finishes, the queued ones stay in the journal), and
// a repeated key answers the first reply without running again.
func TestJournalAsyncAcrossRestart(t *testing.T) {
	a := deployJournalAgent(t, "meepa-test-journal-async")
	once := a.post("once", appendCmd("once.log", "once"), false)
	if !okShell(once) || once.replayed {
		t.Fatalf("first keyed message: %d %s", once.code, once.body)
	}
	var ids []string
	for i := range 4 {
		s := a.post("", appendCmd("async.log", fmt.Sprintf("a%d", i)), true)
		if s.code != http.StatusAccepted || s.id == "" {
			t.Fatalf("submit %d: %d %s", i, s.code, s.body)
		}
		ids = append(ids, s.id)
	}
	pid, _, _ := a.runnerState()
	secs := 30
	testutil.Must(t, a.cli.ContainerRestart(context.Background(), a.cid, container.StopOptions{Timeout: &secs}))
	a.waitBack(pid)
	for i, id := range ids {
		st := a.waitDone(id)
		var r struct {
			Reply string `json:"reply"`
		}
		if err := json.Unmarshal(st.Result, &r); err != nil || st.Status != http.StatusOK || !strings.HasPrefix(r.Reply, "exit 0") {
			t.Errorf("async %d after the restart: %+v %s", i, st, st.Result)
		}
	}
	ran := a.lines("async.log")
	for i := range ids {
		if tag := fmt.Sprintf("a%d", i); ran[tag] != 1 {
			t.Errorf("async message %d ran %d times", i, ran[tag])
		}
	}
	again := a.post("once", appendCmd("once.log", "once"), false)
	if !again.replayed || again.id != once.id || !bytes.Equal(again.body, once.body) {
		t.Errorf("repeated key after the restart: %d %s %s, first %s %s", again.code, again.id, again.body, once.id, once.body)
	}
	if n := a.lines("once.log")["once"]; n != 1 {
		t.Errorf("the keyed message ran %d times", n)
	}
	t.Logf("after the restart: resumed_total=%d journal_records=%d journal_bytes=%d",
		a.metric("resumed_total"), a.metric("journal_records"), a.metric("journal_bytes"))
}

// The journal survives a dockerd restart: the messages submitted before
// it all end done afterwards (answered, or interrupted when dockerd
// stopped their sandbox under them), none runs twice, and their ids and
// keys still answer. It stops the shared daemon: run it under the flock.
func TestJournalSurvivesDockerdRestart(t *testing.T) {
	a := deployJournalAgent(t, "meepa-test-journal-dockerd")
	ensure := filepath.Join(testutil.RepoRoot(), "scripts", "ensure-docker.sh")
	// Whatever happens below, the shared daemon runs again afterwards.
	t.Cleanup(func() {
		if out, err := exec.Command(ensure).CombinedOutput(); err != nil {
			t.Errorf("ensure-docker: %v: %s", err, out)
		}
	})
	var subs []sent
	for i := range 6 {
		s := a.post(fmt.Sprintf("d%d", i), appendCmd("dockerd.log", fmt.Sprintf("d%d", i)), true)
		if s.code != http.StatusAccepted {
			t.Fatalf("submit %d: %d %s", i, s.code, s.body)
		}
		subs = append(subs, s)
	}
	a.waitDone(subs[0].id)
	pid, _, _ := a.runnerState()
	dockerd, err := exec.Command("pidof", "dockerd").Output()
	if err != nil || len(strings.Fields(string(dockerd))) != 1 {
		t.Fatalf("pidof dockerd: %q %v", dockerd, err)
	}
	dpid, _ := strconv.Atoi(strings.TrimSpace(string(dockerd)))
	testutil.Must(t, syscall.Kill(dpid, syscall.SIGTERM))
	for i := 0; syscall.Kill(dpid, 0) == nil; i++ {
		if i > 600 {
			t.Fatal("dockerd did not stop within 60 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, err := exec.Command(ensure).CombinedOutput(); err != nil {
		t.Fatalf("ensure-docker: %v: %s", err, out)
	}
	a.waitBack(pid)
	outcomes := make([]runner.AsyncStatus, len(subs))
	for i, s := range subs {
		outcomes[i] = a.waitDone(s.id)
	}
	counts := map[string]int{}
	ran := a.lines("dockerd.log")
	for i, s := range subs {
		st := outcomes[i]
		again := a.post(fmt.Sprintf("d%d", i), "!sh echo never >> dockerd.log", false)
		if !again.replayed || again.id != s.id || again.code != st.Status {
			t.Errorf("key d%d after the restart: %d %s %s, outcome %d", i, again.code, again.id, again.body, st.Status)
		}
		tag := fmt.Sprintf("d%d", i)
		switch {
		case okShell(again):
			counts["answered"]++
			if ran[tag] != 1 {
				t.Errorf("message %d answered, ran %d times", i, ran[tag])
			}
		case again.kind() == runner.KindInterrupted:
			counts["interrupted"]++
			if ran[tag] > 1 {
				t.Errorf("message %d interrupted, ran %d times", i, ran[tag])
			}
		default:
			// dockerd stopping the sandbox under a message is its error
			// (exit, sandbox), still exactly one outcome.
			counts["error "+again.kind()]++
			if ran[tag] > 1 {
				t.Errorf("message %d ran %d times", i, ran[tag])
			}
		}
	}
	if ran["never"] != 0 {
		t.Error("a repeated key ran its message")
	}
	t.Logf("dockerd restart with %d messages submitted: %v; resumed_total=%d", len(subs), counts, a.metric("resumed_total"))
}
