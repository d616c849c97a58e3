// Package probe runs one connectivity check from inside a container and
// classifies the outcome precisely enough to tell a firewall drop (timeout)
// from a reachable host with a closed port (refused). agent-runner's probe
// subcommand wraps it; the ThreeGate verification runs that in probe
// containers in each role. It has no Docker dependency on purpose: it ends
// up in the agent-runner binary.
package probe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Check kinds.
const (
	TCP     = "tcp"     // dial Target directly
	Connect = "connect" // CONNECT to Target through the proxy Via
	// ConnectAnon is Connect without the egress credential, even when the
	// probe has one: a proxy that requires credentials must refuse it.
	ConnectAnon = "connect-anon"
	DNS         = "dns"    // resolve Target with the system resolver
	DNSAt       = "dns-at" // resolve Target by asking the DNS server Via (ip:port) over UDP
)

// Observations. Blocked means the packet went nowhere: what a firewall
// drop or a missing route produces.
const (
	Open        = "open"
	Refused     = "refused" // the host answered with a reset: reachable
	Timeout     = "timeout"
	Unreachable = "unreachable"
	Allowed     = "allowed" // proxy answered 200 to CONNECT
	Denied      = "denied"  // proxy answered 403
	// AuthRequired: the proxy answered 407, it wants an egress credential.
	AuthRequired = "auth-required"
	Resolved     = "resolved"
	NotResolved  = "not-resolved"
	Failed       = "error"
)

// Blocked reports whether an observation means "no path".
func Blocked(obs string) bool { return obs == Timeout || obs == Unreachable }

// Check is one probe.
type Check struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	Via    string `json:"via,omitempty"`
}

// String is the check's command-line form, parsed back by Parse:
// tcp=host:port, connect=proxyhost:port/host:port (connect-anon too), dns=name,
// dns-at=server:port/name.
func (c Check) String() string {
	if c.Kind == Connect || c.Kind == ConnectAnon || c.Kind == DNSAt {
		return c.Kind + "=" + c.Via + "/" + c.Target
	}
	return c.Kind + "=" + c.Target
}

// Parse reads a check in String's form.
func Parse(s string) (Check, error) {
	kind, rest, ok := strings.Cut(s, "=")
	if !ok || rest == "" {
		return Check{}, fmt.Errorf("check %q: want kind=target", s)
	}
	switch kind {
	case TCP, DNS:
		return Check{Kind: kind, Target: rest}, nil
	case Connect, ConnectAnon, DNSAt:
		via, target, ok := strings.Cut(rest, "/")
		if !ok || via == "" || target == "" {
			return Check{}, fmt.Errorf("check %q: want %s=host:port/target", s, kind)
		}
		return Check{Kind: kind, Via: via, Target: target}, nil
	}
	return Check{}, fmt.Errorf("check %q: unknown kind %q (tcp, connect, connect-anon, dns, dns-at)", s, kind)
}

// Result is one check's outcome; Detail carries the first bytes the far
// side sent, or the error.
type Result struct {
	Check
	Observed string `json:"observed"`
	Detail   string `json:"detail,omitempty"`
}

// EnvProxyAuthorization, when set in the probe's environment, is sent as
// the Proxy-Authorization of its CONNECTs: the egress credential a
// topology's verification mints for its FETCH probe.
const EnvProxyAuthorization = "MEEPA_PROBE_PROXY_AUTHORIZATION"

// Run performs c within timeout.
func Run(ctx context.Context, c Check, timeout time.Duration) Result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r := Result{Check: c}
	switch c.Kind {
	case TCP:
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", c.Target)
		if err != nil {
			r.Observed, r.Detail = classify(err), err.Error()
			return r
		}
		defer func() { _ = conn.Close() }() // the probe's answer is already taken
		r.Observed, r.Detail = Open, banner(conn, 300*time.Millisecond)
	case Connect, ConnectAnon:
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", c.Via)
		if err != nil {
			r.Observed, r.Detail = classify(err), "proxy: "+err.Error()
			return r
		}
		defer func() { _ = conn.Close() }() // as for TCP
		if dl, ok := ctx.Deadline(); ok {
			_ = conn.SetDeadline(dl)
		}
		auth := ""
		if v := os.Getenv(EnvProxyAuthorization); c.Kind == Connect && v != "" && !strings.ContainsAny(v, "\r\n") {
			auth = "Proxy-Authorization: " + v + "\r\n"
		}
		if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", c.Target, c.Target, auth); err != nil {
			r.Observed, r.Detail = classify(err), "proxy: "+err.Error()
			return r
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			r.Observed, r.Detail = classify(err), "proxy reply: "+err.Error()
			return r
		}
		// A CONNECT reply's body is the tunnel: Close does not read it.
		defer func() { _ = resp.Body.Close() }()
		switch resp.StatusCode {
		case http.StatusOK:
			r.Observed = Allowed
			_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
			buf := make([]byte, 64)
			n, _ := br.Read(buf)
			r.Detail = strings.TrimSpace(string(buf[:n]))
		case http.StatusForbidden:
			r.Observed, r.Detail = Denied, resp.Status
		case http.StatusProxyAuthRequired:
			r.Observed, r.Detail = AuthRequired, resp.Status
		default:
			r.Observed, r.Detail = fmt.Sprintf("status-%d", resp.StatusCode), resp.Status
		}
	case DNS:
		addrs, err := net.DefaultResolver.LookupHost(ctx, c.Target)
		if err != nil {
			r.Observed, r.Detail = NotResolved, err.Error()
			return r
		}
		r.Observed, r.Detail = Resolved, strings.Join(addrs, ",")
	case DNSAt:
		// Go's own client, every query sent over UDP to Via: this tests
		// the path to that one server, not the container's resolver.
		// The resolver turns a read error into a DNSError that keeps only
		// its text: the conn keeps the error itself, so a reject (an ICMP
		// port unreachable, read as ECONNREFUSED) is told from a failure.
		var readErr error
		var mu sync.Mutex
		res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, "udp", c.Via)
			if err != nil {
				return nil, err
			}
			return &errConn{UDPConn: conn.(*net.UDPConn), mu: &mu, err: &readErr}, nil
		}}
		addrs, err := res.LookupHost(ctx, c.Target)
		mu.Lock()
		refused := errors.Is(readErr, syscall.ECONNREFUSED)
		mu.Unlock()
		var de *net.DNSError
		switch {
		case err == nil:
			r.Observed, r.Detail = Resolved, strings.Join(addrs, ",")
		case refused:
			r.Observed, r.Detail = Refused, err.Error()
		case errors.As(err, &de) && de.IsNotFound:
			// The server answered: reachable, the name is unknown.
			r.Observed, r.Detail = NotResolved, err.Error()
		case errors.As(err, &de) && de.IsTimeout:
			r.Observed, r.Detail = Timeout, err.Error()
		default:
			r.Observed, r.Detail = classify(err), err.Error()
		}
	default:
		r.Observed, r.Detail = Failed, "unknown check kind "+c.Kind
	}
	return r
}

// errConn records the last read error of a resolver's connection. It is
// a *net.UDPConn underneath, so the resolver still sees a PacketConn and
// sends plain datagrams (a stream conn gets length-prefixed messages).
type errConn struct {
	*net.UDPConn
	mu  *sync.Mutex
	err *error
}

func (c *errConn) Read(b []byte) (int, error) {
	n, err := c.UDPConn.Read(b)
	if err != nil {
		c.mu.Lock()
		*c.err = err
		c.mu.Unlock()
	}
	return n, err
}

func banner(conn net.Conn, wait time.Duration) string {
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 64)
	n, _ := conn.Read(buf)
	return strings.TrimSpace(string(buf[:n]))
}

func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return Refused
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return Unreachable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return Timeout
	case errors.As(err, &ne) && ne.Timeout():
		return Timeout
	}
	return Failed
}
