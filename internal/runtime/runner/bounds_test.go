package runner

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/relay"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner/backends"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// serveAPI runs a real runner on a TCP port, as `agent-runner serve` does.
func serveAPI(t *testing.T, b *scripted) string {
	t.Helper()
	s, err := New(context.Background(), testConfig(), Options{
		Logger: hclog.NewNullLogger(),
		NewBackend: func(context.Context, *agentspec.Config, *relay.Relay, hclog.Logger) (sandbox.Backend, string, error) {
			return b, backends.ModeContainer, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// flood opens n connections that each send a request's first line and then
// header lines without end, with no token, up to perConn bytes or until the
// server gives up on them. It returns the heap in use at its peak.
func flood(t *testing.T, dial func() (net.Conn, error), n, perConn int) uint64 {
	t.Helper()
	line := "X-Flood: " + strings.Repeat("a", 1000) + "\r\n"
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	for range n {
		c, err := dial()
		if err != nil {
			continue // refused: the cap at work
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.WriteString(c, "POST /v1/messages HTTP/1.1\r\nHost: runner\r\n"); err != nil {
				return
			}
			for sent := 0; sent < perConn; sent += len(line) {
				if _, err := io.WriteString(c, line); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	// Every connection has sent what it could and is still open (those
	// the server kept): what the server holds for them is in the heap now.
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	for _, c := range conns {
		_ = c.Close()
	}
	return ms.HeapInuse
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// Issue 19, item 1: 200 connections each sending about 0.9 MB of header
// lines, no token, made the runner hold it all (180 MB here; 400 of them
// OOM-killed a runner at its 256 MiB). Now headers stop at 16 KiB and
// connections at the cap, so the heap barely moves, and the runner answers
// a real message once the flood is gone.
func TestAPIHeaderFloodIsBounded(t *testing.T) {
	b := &scripted{answer: func(req agent.Request) (sandbox.Outcome, error) {
		return replyOutcome(agent.Reply{MessageID: req.Message.ID, Reply: "still here"})
	}}
	addr := serveAPI(t, b)
	before := heapInUse()
	peak := flood(t, func() (net.Conn, error) { return net.Dial("tcp", addr) }, 200, 900<<10)
	grew := int64(peak) - int64(before)
	t.Logf("heap grew by %d KiB under the flood", grew>>10)
	if grew > 32<<20 {
		t.Errorf("the heap grew by %d MiB under the flood; want it bounded (under 32 MiB)", grew>>20)
	}
	// The flood's connections are closed; the server frees their slots as
	// it sees them go, those still in the accept queue included (a 503
	// until then is the cap at work).
	deadline := time.Now().Add(5 * time.Second)
	for !freeSlot(addr) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	st, m := post(t, "http://"+addr, "tok-123", `{"text":"hi"}`)
	if st != 200 || m["reply"] != "still here" {
		t.Fatalf("after the flood: %d %v", st, m)
	}
}

// A 401 ends the connection: a body trickled after it is not read (150 such
// connections were all still held after 20 s).
func TestAPIRefusalClosesTrickledBody(t *testing.T) {
	addr := serveAPI(t, &scripted{})
	trickleAfterRefusal(t, func() (net.Conn, error) { return net.Dial("tcp", addr) }, "/v1/messages")
}

// The relay's socket, which every process of a per-message container
// reaches, is bounded the same way.
func TestRelaySocketBounded(t *testing.T) {
	r := relay.New(hclog.NewNullLogger(), newMetrics(), nil)
	dir := filepath.Join(t.TempDir(), "relay")
	if err := r.Listen(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	dial := func() (net.Conn, error) { return net.Dial("unix", filepath.Join(dir, relay.SocketName)) }
	trickleAfterRefusal(t, dial, "/openai/chat/completions")
	before := heapInUse()
	peak := flood(t, dial, 200, 900<<10)
	grew := int64(peak) - int64(before)
	t.Logf("heap grew by %d KiB under the flood", grew>>10)
	if grew > 32<<20 {
		t.Errorf("the heap grew by %d MiB under the flood; want it bounded (under 32 MiB)", grew>>20)
	}
	// Still serving: a dead token is answered 401, not a dropped connection.
	c := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return dial() }}}
	// (503 while the flood's last connections leave the accept queue.)
	var resp *http.Response
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodPost, "http://meepa-relay/openai/chat/completions", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer meepa-relay-dead")
		var err error
		if resp, err = c.Do(req); err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
	}
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("after the flood: %d, want 401", resp.StatusCode)
	}
}

func trickleAfterRefusal(t *testing.T, dial func() (net.Conn, error), path string) {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_, _ = io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nContent-Length: 100000\r\n\r\n{")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				if _, err := io.WriteString(c, " "); err != nil {
					return
				}
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	raw, err := io.ReadAll(c)
	if err != nil || !strings.HasPrefix(string(raw), "HTTP/1.1 401 ") {
		t.Fatalf("got %q, %v: want a 401 and the connection closed within 3 s", raw, err)
	}
}

// freeSlot says whether the server takes a connection rather than answer
// it 503.
func freeSlot(addr string) bool {
	// Several answers in a row: one free slot may be luck between two
	// queued flood connections.
	for range 5 {
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
	}
	return true
}
