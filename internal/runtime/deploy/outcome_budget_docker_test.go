package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// bigAnswerBytes is what the model answers to every message.
const bigAnswerBytes = 6_000_000

// bigModel is an OpenAI-compatible endpoint on the docker0 bridge's
// address (the runner container, on bridge, reaches it there) whose every
// answer is about 6 MB of text, starting with the call's number.
func bigModel(t *testing.T) (baseURL string, answer func(n int64) string) {
	t.Helper()
	iface, err := net.InterfaceByName("docker0")
	if err != nil {
		t.Skipf("no docker0 bridge: %v", err)
	}
	addrs, _ := iface.Addrs()
	var ip net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			ip = n.IP
		}
	}
	if ip == nil {
		t.Skip("docker0 has no IPv4 address")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	filler := strings.Repeat("0123456789abcdef", bigAnswerBytes/16)
	answer = func(n int64) string { return fmt.Sprintf("answer-%03d:", n) + filler }
	var calls atomic.Int64
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "c", "object": "chat.completion", "created": 0, "model": "m",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": answer(calls.Add(1))}}},
			"usage": map[string]any{"prompt_tokens": 13, "completion_tokens": 5, "total_tokens": 18},
		})
	})}
	go func() { _ = srv.Serve(ln) }() // ends with Close below
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/v1", answer
}

// peakRSS samples the runner process's peak resident set (VmHWM) until
// stop is called, across restarts of the container; it returns the
// highest seen, in MiB.
func (a *journalAgent) peakRSS() (stop func() int) {
	var mu sync.Mutex
	peak := 0
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			if c, err := a.cli.ContainerInspect(context.Background(), a.cid); err == nil && c.State.Pid != 0 {
				if kb := vmHWM(c.State.Pid); kb > 0 {
					mu.Lock()
					peak = max(peak, kb)
					mu.Unlock()
				}
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() int {
		close(done)
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return peak / 1024
	}
}

func vmHWM(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return kb
		}
	}
	return 0
}

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// A model that answers about 6 MB to each of 20 kept messages (keyed and
// asynchronous) against the real runner container and its 256 MiB limit:
// the runner is never OOM-killed or restarted, each reply comes back (cut
// to the reply cap, with the cut said), the journal stays within the
// outcome budget on disk, the oldest outcomes answer 410 evicted, and
// after a restart the runner serves the newest from the journal and still
// answers 410 for the oldest, by id and by key.
func TestRunnerLargeRepliesWithinMemory(t *testing.T) {
	base, answer := bigModel(t)
	a := deployJournalAgent(t, "meepa-test-outcome-budget", func(a *agentspec.Agent) {
		a.Config.LLM = agentspec.LLMConfig{Provider: "openai", Model: "m", BaseURL: base, APIKey: "sk-meepa-budget-test"}
		a.Config.Container.Network = "bridge"
		a.Config.Container.MemoryLimit = agentspec.SizeOf(256 << 20)
	})
	stop := a.peakRSS()
	const n = 20
	ids := make([]string, n)
	for i := range n {
		s := a.post(fmt.Sprintf("big-%02d", i), fmt.Sprintf("message %d", i), true)
		if s.code != http.StatusAccepted {
			t.Fatalf("submit %d: %d %.300s %v", i, s.code, s.body, s.err)
		}
		ids[i] = s.id
		st := a.waitDone(s.id)
		checkBigReply(t, i, st, answer(int64(i+1)))
	}
	// The last one again by its key: the same outcome, from the journal.
	again := a.post(fmt.Sprintf("big-%02d", n-1), "message again", false)
	if again.code != http.StatusOK || !again.replayed || again.id != ids[n-1] {
		t.Errorf("repeated key: %d replayed=%v id %s, want %s", again.code, again.replayed, again.id, ids[n-1])
	}
	checkBigReply(t, n-1, runner.AsyncStatus{Status: again.code, Result: again.body}, answer(n))
	peak := stop()
	c, err := a.cli.ContainerInspect(context.Background(), a.cid)
	testutil.Must(t, err)
	t.Logf("runner peak RSS (VmHWM) over %d messages of %d bytes: %d MiB; restarts %d, OOM-killed %v; journal %d bytes on disk",
		n, bigAnswerBytes, peak, c.RestartCount, c.State.OOMKilled, dirBytes(t, a.journal))
	if c.RestartCount != 0 || c.State.OOMKilled || !c.State.Running {
		t.Fatalf("the runner restarted %d times (OOM-killed %v, running %v):\n%s", c.RestartCount, c.State.OOMKilled, c.State.Running,
			LogTail(context.Background(), a.cli, a.cid, 20))
	}
	if got := dirBytes(t, a.journal); got > runner.DefaultOutcomeBytes+1<<20 {
		t.Errorf("the journal holds %d bytes, over the outcome budget %d", got, runner.DefaultOutcomeBytes)
	}

	// The oldest were evicted to stay within the budget, and say so.
	// A 503 is the runner's connection cap draining the burst's connections.
	code, st, err := a.get(ids[0])
	for tries := 0; code == http.StatusServiceUnavailable && tries < 50; tries++ {
		time.Sleep(100 * time.Millisecond)
		code, st, err = a.get(ids[0])
	}
	if code != http.StatusGone {
		t.Errorf("the first outcome answers %d %+v %v, want 410 evicted", code, st.State, err)
	}

	// A restart: the runner comes back without the kept bodies in memory,
	// and still serves the newest outcome whole.
	pid, _, _ := a.runnerState()
	secs := 30
	testutil.Must(t, a.cli.ContainerRestart(context.Background(), a.cid, container.StopOptions{Timeout: &secs}))
	a.waitBack(pid)
	newPID, _, _ := a.runnerState()
	afterRestart := vmHWM(newPID) / 1024
	checkBigReply(t, n-1, a.waitDone(ids[n-1]), answer(n))
	t.Logf("after the restart: runner VmHWM %d MiB", afterRestart)
	if code, st, err := a.get(ids[0]); code != http.StatusGone {
		t.Errorf("after the restart the first outcome answers %d %+v %v, want 410 evicted", code, st.State, err)
	}
	if s := a.post("big-00", "message 0", false); s.code != http.StatusGone {
		t.Errorf("after the restart a repeat of the first key answers %d %.300s, want 410 evicted", s.code, s.body)
	}
}

// checkBigReply checks that message i's outcome is its model answer, whole
// or cut at the reply cap with the cut said.
func checkBigReply(t *testing.T, i int, st runner.AsyncStatus, want string) {
	t.Helper()
	var r agent.Reply
	if err := json.Unmarshal(st.Result, &r); err != nil || st.Status != http.StatusOK {
		t.Errorf("message %d: status %d, %.300s (%v)", i, st.Status, st.Result, err)
		return
	}
	if r.Reply == want {
		return
	}
	head, _, cut := strings.Cut(r.Reply, agent.ReplyCutMarker)
	if !cut || !strings.HasPrefix(want, head) || len(head) < agentspec.MaxReplyBytes/4 || len(st.Result) > agentspec.MaxReplyBytes {
		t.Errorf("message %d: reply of %d bytes (result %d), neither the answer (%d bytes) nor its start with the cut marker: %.80q…",
			i, len(r.Reply), len(st.Result), len(want), r.Reply)
	}
}
