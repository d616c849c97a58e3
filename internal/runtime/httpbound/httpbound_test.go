package httpbound

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func serve(t *testing.T, h http.Handler, l Limits, max int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Server(h, l, nil)
	go func() { _ = Serve(srv, ln, max, nil) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

var short = Limits{MaxHeaderBytes: 4 << 10, ReadHeader: 200 * time.Millisecond, Read: 300 * time.Millisecond,
	Write: 300 * time.Millisecond, Idle: time.Second, CloseOnRefusal: true}

// The deadlines bound the client, never the handler: a handler that works
// well past Read and Write (a blocking message, a model call) still answers,
// with and without a body, and its request context stays live.
func TestLongHandlerOutlivesDeadlines(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		select {
		case <-time.After(time.Second):
		case <-r.Context().Done():
			http.Error(w, "context ended early", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "done")
	}), short, 4)
	for _, body := range []string{"", "some body"} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", strings.NewReader(body))
		if body == "" {
			req.Body = http.NoBody
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(raw) != "done" {
			t.Errorf("body %q: %d %q", body, resp.StatusCode, raw)
		}
	}
}

// Over the cap a connection is answered 503 at once, not queued.
func TestOverCapRefusedAtOnce(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), short, 2)
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\n") // holds its slot
	}
	time.Sleep(50 * time.Millisecond)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, " 503 ") {
		t.Fatalf("third connection: %q %v, want a 503 at once", line, err)
	}
}

// A refusal ends the connection: a body trickled after it is not read.
func TestRefusalClosesTrickledBody(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusUnauthorized)
	}), Limits{MaxHeaderBytes: 4 << 10, ReadHeader: time.Minute, Read: time.Minute, Write: time.Minute, Idle: time.Minute, CloseOnRefusal: true}, 4)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nab")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := io.WriteString(c, "x"); err != nil {
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

// At the cap, connections a client keeps alive and never reuses make room
// for a new client (each its own transport, as a poll loop that builds a
// client per request does), while busy connections keep their slots: the
// newcomer then gets 503.
func TestIdleConnectionsMakeRoom(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{}, 3)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			started <- struct{}{}
			<-release
		}
	}), Limits{MaxHeaderBytes: 4 << 10, ReadHeader: time.Minute, Read: time.Minute, Write: time.Minute, Idle: time.Minute}, nil)
	// The server marks a connection idle only after its client has the
	// answer; the test waits for that instead of racing it.
	var mu sync.Mutex
	idle := map[net.Conn]bool{}
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		idle[c] = st == http.StateIdle
		if st == http.StateClosed {
			delete(idle, c)
		}
	}
	go func() { _ = Serve(srv, ln, 3, nil) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()
	allIdle := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, i := range idle {
			if !i {
				return false
			}
		}
		return true
	}
	get := func(path string) (int, error) {
		c := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second} // never closed: its connection stays idle
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	for i := range 10 {
		if code, err := get("/"); err != nil || code != http.StatusOK {
			t.Fatalf("request %d with the earlier ones' connections idle: %d %v", i, code, err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); !allIdle(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the answered connections were not idle within 5 s")
		}
	}
	// Every slot busy in a handler, not merely dialled: each blocking
	// request is in its handler before the next is sent (sent together, a
	// loaded machine let one find no idle connection to evict, so it got
	// 503 and never started).
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 3)
	for i := range 3 {
		go func() { code, err := get("/block"); done <- result{code, err} }()
		select {
		case <-started:
		case r := <-done:
			close(release)
			t.Fatalf("blocking request %d came back before its handler ran: %d %v", i, r.code, r.err)
		}
	}
	code, err := get("/")
	close(release)
	for range 3 {
		<-done
	}
	if err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("with every slot busy: %d %v, want 503", code, err)
	}
}
