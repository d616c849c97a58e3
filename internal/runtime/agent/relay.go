package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/httpbound"
)

// RelayFD is the descriptor on which a host-mode agent-run inherits its
// connected socket to the runner's LLM relay (fd 3 carries the Landlock
// rules to landlock-exec).
const RelayFD = 4

// Environment variables that tell tool processes where the relay is when
// Request.InjectCredentialsEnv is set: MEEPA_LLM_BASE_URL always, plus the
// vendor's usual name for its SDKs and CLIs.
const (
	EnvLLMBaseURL       = "MEEPA_LLM_BASE_URL"
	EnvOpenAIBaseURL    = "OPENAI_BASE_URL"
	EnvAnthropicBaseURL = "ANTHROPIC_BASE_URL"
)

// Relay says how the loop reaches the runner's LLM relay. With a relay the
// request's llm.api_key is a token valid for this message only and
// llm.base_url names the relay; the real key stays with the runner.
type Relay struct {
	// Socket is the relay's unix socket (container mode).
	Socket string `json:"socket,omitempty"`
	// FD is an inherited, connected socket to the relay (host mode). The
	// loop takes it before anything else runs, so no tool inherits it.
	FD int `json:"fd,omitempty"`
	// Stream says the relay is carried on agent-run's own stdin and stdout
	// (a Kubernetes message pod, package podio); Options.RelayConn is its
	// connection.
	Stream bool `json:"stream,omitempty"`
}

// relayTransport is an HTTP transport whose every connection goes to the
// relay, whatever the URL's host: no DNS, no proxy, no network route.
func relayTransport(r *Relay, stream net.Conn) (*http.Transport, func(), error) {
	tr := &http.Transport{
		Proxy:             nil,
		ForceAttemptHTTP2: false,
		// Tools (through the loopback forwarder) and the loop share it.
		MaxIdleConnsPerHost: 4,
	}
	switch {
	case r.Socket != "":
		sock := r.Socket
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}
		return tr, func() { tr.CloseIdleConnections() }, nil
	case r.FD > 0:
		f := os.NewFile(uintptr(r.FD), "relay")
		if f == nil {
			return nil, nil, fmt.Errorf("relay: fd %d is not open", r.FD)
		}
		// FileConn dups the descriptor close-on-exec; the inherited one is
		// closed so that no tool process inherits a way to the relay.
		conn, err := net.FileConn(f)
		_ = f.Close() // conn holds its own descriptor, or there is none
		if err != nil {
			return nil, nil, fmt.Errorf("relay: fd %d: %w", r.FD, err)
		}
		tr, stop := oneConnTransport(tr, conn)
		return tr, stop, nil
	case r.Stream:
		if stream == nil {
			return nil, nil, errors.New("relay: the request names the stdio stream, but agent-run was not started with --frames")
		}
		tr, stop := oneConnTransport(tr, stream)
		return tr, stop, nil
	}
	return nil, nil, errors.New("relay: neither a socket nor a descriptor")
}

// oneConnTransport makes tr use conn for every call, one at a time:
// HTTP/1.1 keep-alive carries every call of the message over it. There is
// no second connection to dial.
func oneConnTransport(tr *http.Transport, conn net.Conn) (*http.Transport, func()) {
	var mu sync.Mutex
	taken := false
	tr.MaxConnsPerHost = 1
	tr.MaxIdleConnsPerHost = 1
	tr.DialContext = func(context.Context, string, string) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if taken {
			return nil, errors.New("relay: the connection to the runner is closed")
		}
		taken = true
		return conn, nil
	}
	// At the end the message is over: the close has nothing left to send.
	return tr, func() { tr.CloseIdleConnections(); _ = conn.Close() }
}

// forwarderLimits bound the forwarder as the relay's socket is bounded
// (any process of the sandbox reaches it): small headers, the request
// within a minute, the answer taken within 30 s, a refusal the end of the
// connection; a model call waits as long as the relay lets it.
var forwarderLimits = httpbound.Limits{
	MaxHeaderBytes: 32 << 10,
	ReadHeader:     10 * time.Second,
	Read:           60 * time.Second,
	Write:          30 * time.Second,
	Idle:           90 * time.Second,
	CloseOnRefusal: true,
}

// forwarderConns caps the forwarder's open connections.
const forwarderConns = 32

// relayForwarder serves the relay to tool processes on a loopback TCP port
// (inject_credentials_env): SDKs and CLIs take an http base URL, not a unix
// socket. It carries the tool's own request, token included, unchanged; the
// relay checks it.
func relayForwarder(tr http.RoundTripper) (base string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("relay forwarder: %w", err)
	}
	proxy := &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "meepa-relay"
			pr.Out.Host = "meepa-relay"
		},
	}
	srv := httpbound.Server(proxy, forwarderLimits, nil)
	go func() { _ = httpbound.Serve(srv, ln, forwarderConns, nil) }()
	port := ln.Addr().(*net.TCPAddr).Port
	return "http://127.0.0.1:" + strconv.Itoa(port), func() { _ = srv.Close() }, nil
}
