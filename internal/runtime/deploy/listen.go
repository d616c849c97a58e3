package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// Listener is where a runner listens: a unix socket path or a loopback TCP
// port. Nothing else is accepted: the runner's API starts agents, so it is
// never exposed beyond the host.
type Listener struct {
	// Unix is an absolute socket path; empty for TCP.
	Unix string
	// Port is the loopback TCP port; zero for unix.
	Port int
}

// ParseListen parses "unix:///abs/path.sock" or "127.0.0.1:<port>" (also
// "localhost:<port>").
func ParseListen(s string) (Listener, error) {
	if p, ok := strings.CutPrefix(s, "unix://"); ok {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return Listener{}, fmt.Errorf("%q: the socket path must be absolute and clean, as in unix:///run/meepa/agent.sock", s)
		}
		// The socket's directory is mounted into the runner container.
		if err := sandbox.CheckHostDir(filepath.Dir(p)); err != nil {
			return Listener{}, fmt.Errorf("%q: the socket needs a directory of its own, as in unix:///run/meepa/agent.sock: %w", s, err)
		}
		return Listener{Unix: p}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return Listener{}, fmt.Errorf("%q is neither unix:///<path> nor 127.0.0.1:<port>", s)
	}
	if host != "127.0.0.1" && host != "localhost" {
		return Listener{}, fmt.Errorf("%q: only 127.0.0.1 may be listened on; the runner's API starts agents and must not be reachable from other machines", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return Listener{}, fmt.Errorf("%q: the port must be 1-65535", s)
	}
	return Listener{Port: n}, nil
}

// String is the form agentspec.Config.Listen takes.
func (l Listener) String() string {
	if l.Unix != "" {
		return "unix://" + l.Unix
	}
	return "127.0.0.1:" + strconv.Itoa(l.Port)
}

// Endpoint is the URL a client uses: unix:///path for a socket (curl
// --unix-socket /path http://localhost/v1/messages) or http://127.0.0.1:port.
func (l Listener) Endpoint() string {
	if l.Unix != "" {
		return "unix://" + l.Unix
	}
	return "http://127.0.0.1:" + strconv.Itoa(l.Port)
}

// Client returns an HTTP client that reaches the listener, and the base URL
// to use with it. Callers make one per check or poll, so the unix-socket
// client keeps no connection alive after its answer: a kept one would sit
// in a slot of the runner's connection cap, and hold a goroutine here,
// until the runner's idle timeout.
func (l Listener) Client(timeout time.Duration) (*http.Client, string) {
	if l.Unix == "" {
		return &http.Client{Timeout: timeout}, l.Endpoint()
	}
	sock := l.Unix
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}
	return &http.Client{Timeout: timeout, Transport: tr}, "http://runner"
}

// Health is the runner's /healthz answer, kept whole: fields are added by the
// runner over time (e.g. landlock_abi).
type Health map[string]any

// Int returns a numeric field, or -1 when absent.
func (h Health) Int(key string) int64 {
	switch v := h[key].(type) {
	case float64:
		return int64(v)
	case json.Number:
		n, err := v.Int64()
		if err == nil {
			return n
		}
	}
	return -1
}

// CheckHealth asks the runner's /healthz once.
func CheckHealth(ctx context.Context, l Listener) (Health, error) {
	cli, base := l.Client(5 * time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return nil, err
	}
	resp, err := cli.Do(req)
	if err != nil {
		return nil, fmt.Errorf("healthz: %w", err)
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("healthz: %s: %s", resp.Status, strings.TrimSpace(string(raw)))
	}
	h := Health{}
	if err := json.Unmarshal(raw, &h); err != nil {
		// A plain "ok" is healthy too; there is just nothing to read.
		return Health{}, nil
	}
	return h, nil
}
