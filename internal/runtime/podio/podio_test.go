package podio

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// Both ends of a pod's stdio, as the runner and agent-run use them: the
// request crosses in frames and ends, then HTTP over the relay connection
// works in both directions (several calls on one connection) while the
// reply travels beside it on the same stream.
func TestStreamCarriesRequestRelayAndReply(t *testing.T) {
	toPodR, toPodW := io.Pipe()
	fromPodR, fromPodW := io.Pipe()
	runnerOut, podOut := NewWriter(toPodW), NewWriter(fromPodW)

	// The runner: its relay end, fed by the demux of the pod's stdout.
	runnerConn, runnerSink := Pipe(runnerOut)
	var reply bytes.Buffer
	demuxed := make(chan error, 1)
	go func() {
		err := Demux(fromPodR, map[byte]io.Writer{KindReply: &reply, KindRelay: runnerSink})
		runnerSink.End(err)
		demuxed <- err
	}()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, strings.ToUpper(string(b)))
	})}
	go func() { _ = srv.Serve(&listener{c: runnerConn, done: make(chan struct{})}) }()
	defer func() { _ = srv.Close() }()

	big := bytes.Repeat([]byte("r"), MaxPayload+10)
	go func() {
		if err := WriteRequest(runnerOut, big); err != nil {
			t.Errorf("write request: %v", err)
		}
	}()

	// The pod: the request first, then the relay.
	req, err := ReadRequest(toPodR, len(big))
	if err != nil || !bytes.Equal(req, big) {
		t.Fatalf("request: %d bytes, %v", len(req), err)
	}
	podConn, podSink := Pipe(podOut)
	go func() { podSink.End(Demux(toPodR, map[byte]io.Writer{KindRelay: podSink})) }()
	used := false
	tr := &http.Transport{MaxConnsPerHost: 1}
	tr.DialContext = func(context.Context, string, string) (net.Conn, error) {
		if used {
			t.Error("a second connection was dialled")
			return nil, net.ErrClosed
		}
		used = true
		return podConn, nil
	}
	hc := &http.Client{Transport: tr}
	for _, body := range []string{"one", "two"} {
		resp, err := hc.Post("http://relay/x", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatalf("relay call %s: %v", body, err)
		}
		got, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if string(got) != strings.ToUpper(body) {
			t.Errorf("relay answer %q, want %q", got, strings.ToUpper(body))
		}
	}
	if err := podOut.Write(KindReply, []byte(`{"reply":"done"}`)); err != nil {
		t.Fatal(err)
	}
	tr.CloseIdleConnections()
	_ = fromPodW.Close()
	if err := <-demuxed; err != nil {
		t.Fatalf("demux: %v", err)
	}
	if reply.String() != `{"reply":"done"}` {
		t.Errorf("reply %q", reply.String())
	}
}

func TestReadFrameRefuses(t *testing.T) {
	over := make([]byte, 5)
	over[0] = KindReply
	binary.BigEndian.PutUint32(over[1:], MaxPayload+1)
	cases := map[string][]byte{
		"oversized":   over,
		"cut header":  {KindReply, 0, 0},
		"cut payload": {KindReply, 0, 0, 0, 4, 'a'},
	}
	for name, raw := range cases {
		if _, _, err := ReadFrame(bytes.NewReader(raw)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// A kind nobody expects ends the demux with an error.
	var w bytes.Buffer
	if err := NewWriter(&w).Write('x', []byte("?")); err != nil {
		t.Fatal(err)
	}
	if err := Demux(&w, map[byte]io.Writer{KindReply: io.Discard}); err == nil {
		t.Error("an unknown frame kind was accepted")
	}
	// A request that is too long is refused, not truncated.
	w.Reset()
	if err := WriteRequest(NewWriter(&w), []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRequest(&w, 9); err == nil {
		t.Error("a request over the limit was accepted")
	}
}

// Relay bytes that arrive after the connection was closed are dropped, so
// the reply that follows them still arrives.
func TestLateRelayBytesDoNotBreakTheStream(t *testing.T) {
	var stream bytes.Buffer
	w := NewWriter(&stream)
	testWrite(t, w, KindRelay, "late")
	testWrite(t, w, KindReply, "reply")
	conn, sink := Pipe(NewWriter(io.Discard))
	_ = conn.Close()
	var reply bytes.Buffer
	if err := Demux(&stream, map[byte]io.Writer{KindRelay: sink, KindReply: &reply}); err != nil {
		t.Fatalf("demux: %v", err)
	}
	if reply.String() != "reply" {
		t.Errorf("reply %q", reply.String())
	}
}

func testWrite(t *testing.T, w *Writer, kind byte, s string) {
	t.Helper()
	if err := w.Write(kind, []byte(s)); err != nil {
		t.Fatal(err)
	}
}

// listener hands out one connection, then blocks until closed.
type listener struct {
	c    net.Conn
	done chan struct{}
}

func (l *listener) Accept() (net.Conn, error) {
	if c := l.c; c != nil {
		l.c = nil
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *listener) Close() error {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	return nil
}

func (l *listener) Addr() net.Addr { return addr{} }
