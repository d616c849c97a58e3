package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// --- helpers ---------------------------------------------------------------

// mapResolver answers from a fixed table and counts lookups.
type mapResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr // per name, one answer per successive lookup (the last repeats)
	lookups map[string]int
}

func newResolver(names map[string]string) *mapResolver {
	r := &mapResolver{answers: map[string][][]netip.Addr{}, lookups: map[string]int{}}
	for n, ip := range names {
		r.answers[n] = [][]netip.Addr{{netip.MustParseAddr(ip)}}
	}
	return r
}

func (r *mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !strings.HasSuffix(host, ".") {
		return nil, fmt.Errorf("lookup of unrooted name %q", host)
	}
	host = strings.TrimSuffix(host, ".")
	seq, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := r.lookups[host]
	r.lookups[host]++
	if i >= len(seq) {
		i = len(seq) - 1
	}
	return seq[i], nil
}

func (r *mapResolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups[host]
}

// tcpServer is an echo server on 127.0.0.1 that records who connected.
type tcpServer struct {
	ln       net.Listener
	mu       sync.Mutex
	accepted []string // remote addresses, in accept order
}

func startEcho(t *testing.T) *tcpServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tcpServer{ln: ln}
	testutil.Cleanup(t, "close listener", func() error { return testutil.Gone(ln.Close()) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.accepted = append(s.accepted, c.RemoteAddr().String())
			s.mu.Unlock()
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return s
}

func (s *tcpServer) port() uint16 { return uint16(s.ln.Addr().(*net.TCPAddr).Port) }

func (s *tcpServer) acceptedList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.accepted...)
}

// assertNoEarlierConnection proves the server was never connected to
// before now: it dials the server itself and checks its own connection is
// the first one accepted (accept order is connection order).
func (s *tcpServer) assertNoEarlierConnection(t *testing.T) {
	t.Helper()
	c, err := net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	probe := c.LocalAddr().String()
	waitFor(t, "probe accepted", func() bool { return len(s.acceptedList()) > 0 })
	if got := s.acceptedList(); got[0] != probe {
		t.Fatalf("the test server was connected to before the probe: accepted %v, probe %s", got, probe)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type testProxy struct {
	addr  string
	srv   *Server
	audit *syncBuffer
}

func startProxy(t testing.TB, opts Options, adjust ...func(*Server)) *testProxy {
	t.Helper()
	audit := &syncBuffer{}
	opts.Audit = audit
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range adjust {
		f(srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("cleanup: proxy shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return &testProxy{addr: ln.Addr().String(), srv: srv, audit: audit}
}

// records parses the audit log; every line must be one JSON object with
// every field present.
func (p *testProxy) records(t *testing.T) []AuditRecord {
	t.Helper()
	var out []AuditRecord
	for _, line := range strings.Split(strings.TrimSpace(p.audit.String()), "\n") {
		if line == "" {
			continue
		}
		var raw map[string]any
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			t.Fatalf("audit line is not JSON: %q: %v", line, err)
		}
		for _, f := range []string{"time", "client", "method", "host", "port", "decision", "reason", "status", "bytes_up", "bytes_down", "duration_ms"} {
			if _, ok := raw[f]; !ok {
				t.Errorf("audit line %q lacks %q", line, f)
			}
		}
		var rec AuditRecord
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if _, err := time.Parse(time.RFC3339Nano, rec.Time); err != nil {
			t.Errorf("audit time %q is not RFC 3339: %v", rec.Time, err)
		}
		out = append(out, rec)
	}
	return out
}

// waitRecords waits until the audit log has n lines (a tunnel's line is
// written when it closes).
func (p *testProxy) waitRecords(t *testing.T, n int) []AuditRecord {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d audit lines", n), func() bool {
		return strings.Count(p.audit.String(), "\n") >= n
	})
	recs := p.records(t)
	if len(recs) != n {
		t.Fatalf("audit has %d lines, want %d:\n%s", len(recs), n, p.audit.String())
	}
	return recs
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// connectReply is the proxy's answer to a CONNECT.
type connectReply struct{ StatusCode int }

// connect sends a CONNECT and returns the proxy's answer, its body and, on
// 200, the tunnel.
func connect(t *testing.T, proxyAddr, target string) (connectReply, string, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "close connection", func() error { return testutil.Gone(c.Close()) })
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	reply := connectReply{StatusCode: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		_ = c.Close()
		return reply, string(body), nil
	}
	// A 200's body is the tunnel; closing it reads nothing.
	_ = resp.Body.Close()
	if br.Buffered() > 0 {
		t.Fatalf("proxy sent %d bytes after the 200 before the upstream did", br.Buffered())
	}
	return reply, "", c
}

// peerConn reports a different peer, as if the connection went elsewhere.
type peerConn struct {
	*net.TCPConn
	peer *net.TCPAddr
}

func (c peerConn) RemoteAddr() net.Addr { return c.peer }

func loopbackOnly() []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} }

func hostPort(host string, port uint16) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// --- tests -----------------------------------------------------------------

func TestConnectAllowedBytesFlow(t *testing.T) {
	echo := startEcho(t)
	res := newResolver(map[string]string{"echo.test": "127.0.0.1"})
	allow, _ := ParseAllowlist([]string{hostPort("echo.test", echo.port())})
	p := startProxy(t, Options{Allow: allow, AllowPrivate: loopbackOnly(), Resolver: res})

	resp, _, tun := connect(t, p.addr, hostPort("echo.test", echo.port()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT status %d, want 200", resp.StatusCode)
	}
	payload := []byte("ping through the tunnel")
	if _, err := tun.Write(payload); err != nil {
		t.Fatal(err)
	}
	_ = tun.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(tun)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("echo = %q, want %q", got, payload)
	}

	rec := p.waitRecords(t, 1)[0]
	if rec.Method != http.MethodConnect || rec.Host != "echo.test" || rec.Port != echo.port() || rec.IP != "127.0.0.1" {
		t.Errorf("audit = %+v", rec)
	}
	if rec.Decision != DecisionAllow || rec.Status != 200 {
		t.Errorf("decision %q status %d, want allow 200", rec.Decision, rec.Status)
	}
	if rec.BytesUp != int64(len(payload)) || rec.BytesDown != int64(len(payload)) {
		t.Errorf("bytes up/down = %d/%d, want %d/%d", rec.BytesUp, rec.BytesDown, len(payload), len(payload))
	}
	if !strings.HasPrefix(rec.Client, "127.0.0.1:") {
		t.Errorf("client = %q", rec.Client)
	}
	if res.count("echo.test") != 1 {
		t.Errorf("resolved %d times, want once", res.count("echo.test"))
	}
}

func TestConnectTLSThroughProxy(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello over tls")
	}))
	defer ts.Close()
	port := uint16(ts.Listener.Addr().(*net.TCPAddr).Port)
	allow, _ := ParseAllowlist([]string{hostPort("tls.test", port)})
	p := startProxy(t, Options{Allow: allow, AllowPrivate: loopbackOnly(), Resolver: newResolver(map[string]string{"tls.test": "127.0.0.1"})})

	tr := ts.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: p.addr})
	tr.TLSClientConfig.ServerName = "example.com" // a name in httptest's certificate
	client := &http.Client{Transport: tr}
	resp, err := client.Get("https://" + hostPort("tls.test", port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(body) != "hello over tls" {
		t.Fatalf("body %q", body)
	}
	tr.CloseIdleConnections()
	rec := p.waitRecords(t, 1)[0]
	if rec.Decision != DecisionAllow || rec.BytesUp == 0 || rec.BytesDown == 0 {
		t.Errorf("audit = %+v", rec)
	}
}

func TestConnectDisallowedPort(t *testing.T) {
	echo := startEcho(t)
	allow, _ := ParseAllowlist([]string{hostPort("echo.test", echo.port())})
	p := startProxy(t, Options{Allow: allow, AllowPrivate: loopbackOnly(), Resolver: newResolver(map[string]string{"echo.test": "127.0.0.1"})})

	other := echo.port() + 1
	resp, body, _ := connect(t, p.addr, hostPort("echo.test", other))
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, want 403", resp.StatusCode)
	}
	want := fmt.Sprintf("refused echo.test:%d: not in allowlist", other)
	if !strings.Contains(body, want) {
		t.Errorf("body %q, want it to contain %q", body, want)
	}
	rec := p.waitRecords(t, 1)[0]
	if rec.Decision != DecisionDeny || rec.Status != 403 || rec.Reason != "not in allowlist" || rec.Port != other || rec.IP != "" {
		t.Errorf("audit = %+v", rec)
	}
}

// TestAnyHost: a runner's own broker lets any destination through its
// (empty) allow list, and still refuses a special range AllowPrivate does
// not cover.
func TestAnyHost(t *testing.T) {
	echo := startEcho(t)
	res := newResolver(map[string]string{"echo.test": "127.0.0.1"})
	p := startProxy(t, Options{AnyHost: true, AllowPrivate: loopbackOnly(), Resolver: res})
	if resp, body, _ := connect(t, p.addr, hostPort("echo.test", echo.port())); resp.StatusCode != http.StatusOK {
		t.Fatalf("AnyHost: status %d (%s), want 200", resp.StatusCode, body)
	}
	q := startProxy(t, Options{AnyHost: true, Resolver: res})
	if resp, body, _ := connect(t, q.addr, hostPort("echo.test", echo.port())); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "loopback") {
		t.Fatalf("AnyHost to loopback without AllowPrivate: %d %q, want a 403 naming the range", resp.StatusCode, body)
	}
}

func TestPlainHTTPForward(t *testing.T) {
	type seen struct{ host, proxyAuth, path string }
	got := make(chan seen, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Host, r.Header.Get("Proxy-Authorization"), r.URL.RequestURI()}
		_, _ = io.WriteString(w, "plain hello")
	}))
	defer ts.Close()
	port := uint16(ts.Listener.Addr().(*net.TCPAddr).Port)
	allow, _ := ParseAllowlist([]string{hostPort("plain.test", port)})
	p := startProxy(t, Options{Allow: allow, AllowPrivate: loopbackOnly(), Resolver: newResolver(map[string]string{"plain.test": "127.0.0.1"})})

	req, _ := http.NewRequest(http.MethodGet, "http://"+hostPort("plain.test", port)+"/x?token=sekrit-token", nil)
	req.Header.Set("Proxy-Authorization", "Basic c2VrcmV0LXBhc3M=")
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: p.addr})}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "plain hello" {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	s := <-got
	if s.host != hostPort("plain.test", port) || s.path != "/x?token=sekrit-token" {
		t.Errorf("upstream saw host %q path %q", s.host, s.path)
	}
	if s.proxyAuth != "" {
		t.Errorf("Proxy-Authorization leaked upstream: %q", s.proxyAuth)
	}

	rec := p.waitRecords(t, 1)[0]
	if rec.Method != http.MethodGet || rec.Host != "plain.test" || rec.Decision != DecisionAllow || rec.Status != 200 || rec.BytesDown != int64(len("plain hello")) {
		t.Errorf("audit = %+v", rec)
	}
	for _, secret := range []string{"sekrit-token", "c2VrcmV0", "/x"} {
		if strings.Contains(p.audit.String(), secret) {
			t.Errorf("audit log contains %q: %s", secret, p.audit.String())
		}
	}

	// a request body is forwarded and counted as bytes up, never logged
	payload := "field=private-form-value"
	resp, err = (&http.Client{Transport: tr}).Post("http://"+hostPort("plain.test", port)+"/form", "application/x-www-form-urlencoded", strings.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	<-got
	rec = p.waitRecords(t, 2)[1]
	if rec.Method != http.MethodPost || rec.BytesUp != int64(len(payload)) || rec.Decision != DecisionAllow {
		t.Errorf("audit = %+v", rec)
	}
	if strings.Contains(p.audit.String(), "private-form-value") {
		t.Error("audit log contains the request body")
	}
}

// The name is allowed but resolves to a private address: refused, and the
// server behind that address never sees a connection.
func TestAllowedNameResolvingPrivateIsRefused(t *testing.T) {
	echo := startEcho(t)
	allow, _ := ParseAllowlist([]string{hostPort("rebind.test", echo.port())})
	p := startProxy(t, Options{Allow: allow, Resolver: newResolver(map[string]string{"rebind.test": "127.0.0.1"})})

	resp, body, _ := connect(t, p.addr, hostPort("rebind.test", echo.port()))
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, want 403", resp.StatusCode)
	}
	if !strings.Contains(body, "private address 127.0.0.1: loopback") {
		t.Errorf("body %q does not say why", body)
	}
	// plain HTTP takes the same path
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: p.addr})}
	defer tr.CloseIdleConnections()
	hresp, err := (&http.Client{Transport: tr}).Get("http://" + hostPort("rebind.test", echo.port()) + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = hresp.Body.Close()
	if hresp.StatusCode != http.StatusForbidden {
		t.Errorf("plain GET status %d, want 403", hresp.StatusCode)
	}

	recs := p.waitRecords(t, 2)
	for _, rec := range recs {
		if rec.Decision != DecisionDeny || rec.IP != "127.0.0.1" || !strings.HasPrefix(rec.Reason, "private address") {
			t.Errorf("audit = %+v", rec)
		}
	}
	echo.assertNoEarlierConnection(t)
}

// DNS rebinding: the first lookup gives an acceptable address, the second a
// private one. The proxy must dial only addresses it vetted, by IP, never
// the name again.
func TestRebindingNeverReachesPrivate(t *testing.T) {
	echo := startEcho(t)
	// 198.51.100.7 stands in for a public address; it is exempted so the
	// policy accepts it, and the dial hook carries it to the loopback echo
	// server, so nothing leaves the machine.
	public := netip.MustParseAddr("198.51.100.7")
	res := &mapResolver{lookups: map[string]int{}, answers: map[string][][]netip.Addr{
		"flip.test": {{public}, {netip.MustParseAddr("127.0.0.1")}},
	}}
	allow, _ := ParseAllowlist([]string{hostPort("flip.test", echo.port())})
	var mu sync.Mutex
	var dialed []string
	p := startProxy(t, Options{Allow: allow, AllowPrivate: []netip.Prefix{netip.PrefixFrom(public, 32)}, Resolver: res},
		func(s *Server) {
			real := s.dial
			s.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				mu.Lock()
				dialed = append(dialed, addr)
				mu.Unlock()
				if addr == hostPort(public.String(), echo.port()) {
					var d net.Dialer
					c, err := d.DialContext(ctx, network, echo.ln.Addr().String())
					if err != nil {
						return nil, err
					}
					// what a real connection to the public address reports
					return peerConn{c.(*net.TCPConn), net.TCPAddrFromAddrPort(netip.AddrPortFrom(public, echo.port()))}, nil
				}
				return real(ctx, network, addr)
			}
		})

	// first request: allowed, reaches "public" (the echo server via the hook)
	resp, _, tun := connect(t, p.addr, hostPort("flip.test", echo.port()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first CONNECT status %d", resp.StatusCode)
	}
	_, _ = tun.Write([]byte("x"))
	_ = tun.(*net.TCPConn).CloseWrite()
	_, _ = io.ReadAll(tun) // the echo; only the second CONNECT is checked

	// second request: the name now resolves to 127.0.0.1
	resp, body, _ := connect(t, p.addr, hostPort("flip.test", echo.port()))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "private address 127.0.0.1") {
		t.Fatalf("second CONNECT: %d %q, want 403 private address", resp.StatusCode, body)
	}

	// the tunnel's line is written when it closes, so the order may vary
	recs := p.waitRecords(t, 2)
	if recs[0].Decision == DecisionDeny {
		recs[0], recs[1] = recs[1], recs[0]
	}
	if recs[0].IP != public.String() || recs[0].Decision != DecisionAllow || recs[1].IP != "127.0.0.1" || recs[1].Decision != DecisionDeny {
		t.Errorf("audit = %+v", recs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialed) != 1 || dialed[0] != hostPort(public.String(), echo.port()) {
		t.Fatalf("dial targets %v, want only %s", dialed, hostPort(public.String(), echo.port()))
	}
	if n := len(echo.acceptedList()); n != 1 {
		t.Fatalf("echo server accepted %d connections, want 1 (the hooked public dial)", n)
	}
	if res.count("flip.test") != 2 {
		t.Errorf("lookups = %d, want exactly one per request", res.count("flip.test"))
	}
}

// A mixed answer (acceptable + private) whose acceptable address fails must
// not fall back to the private one.
func TestMixedAnswerNeverFallsBackToPrivate(t *testing.T) {
	echo := startEcho(t)
	public := netip.MustParseAddr("198.51.100.9")
	res := &mapResolver{lookups: map[string]int{}, answers: map[string][][]netip.Addr{
		"mixed.test": {{public, netip.MustParseAddr("127.0.0.1")}},
	}}
	allow, _ := ParseAllowlist([]string{hostPort("mixed.test", echo.port())})
	var dialed []string
	p := startProxy(t, Options{Allow: allow, AllowPrivate: []netip.Prefix{netip.PrefixFrom(public, 32)}, Resolver: res},
		func(s *Server) {
			s.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				dialed = append(dialed, addr)
				return nil, errors.New("unreachable in this test")
			}
		})
	resp, body, _ := connect(t, p.addr, hostPort("mixed.test", echo.port()))
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d %q, want 502", resp.StatusCode, body)
	}
	rec := p.waitRecords(t, 1)[0]
	if rec.Decision != DecisionError || rec.Status != 502 {
		t.Errorf("audit = %+v", rec)
	}
	if len(dialed) != 1 || dialed[0] != hostPort(public.String(), echo.port()) {
		t.Fatalf("dial targets %v, want only the acceptable address", dialed)
	}
	echo.assertNoEarlierConnection(t)
}

// The Control hook refuses any address that connect did not vet, and any
// private address without an exemption, even when called directly.
func TestDialControlRefusesUnvettedAddress(t *testing.T) {
	echo := startEcho(t)
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	target := echo.ln.Addr().String()
	loop := netip.MustParseAddr("127.0.0.1")
	cases := map[string]context.Context{
		"unvetted":         context.Background(),
		"vetted elsewhere": context.WithValue(context.Background(), vettedKey{}, netip.MustParseAddr("127.0.0.2")),
		"vetted private":   context.WithValue(context.Background(), vettedKey{}, loop),
	}
	for name, ctx := range cases {
		if c, err := s.dial(ctx, "tcp", target); err == nil {
			_ = c.Close()
			t.Errorf("%s: dial %s succeeded", name, target)
		}
	}
	if c, err := s.dial(context.WithValue(context.Background(), vettedKey{}, loop), "tcp", "localhost:"+strconv.Itoa(int(echo.port()))); err == nil {
		_ = c.Close()
		t.Error("dialing a name succeeded")
	}
	echo.assertNoEarlierConnection(t)

	// with the range exempted, the vetted address goes through
	s2, err := New(Options{AllowPrivate: loopbackOnly()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s2.dial(context.WithValue(context.Background(), vettedKey{}, loop), "tcp", target)
	if err != nil {
		t.Fatalf("exempted vetted dial: %v", err)
	}
	_ = c.Close()
}

// An IP-literal allowlist entry is an explicit exemption for that address.
func TestIPLiteralEntryIsExplicit(t *testing.T) {
	echo := startEcho(t)
	allow, _ := ParseAllowlist([]string{hostPort("127.0.0.1", echo.port())})
	p := startProxy(t, Options{Allow: allow})

	resp, _, tun := connect(t, p.addr, hostPort("127.0.0.1", echo.port()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	_ = tun.Close()
	// 127.0.0.2 is the same range but not the listed address
	resp, body, _ := connect(t, p.addr, hostPort("127.0.0.2", echo.port()))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not in allowlist") {
		t.Fatalf("127.0.0.2: %d %q", resp.StatusCode, body)
	}
}

func TestIPv6LiteralConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.Copy(c, c)
			_ = c.Close()
		}
	}()
	defer func() { _ = ln.Close() }()
	allow, _ := ParseAllowlist([]string{hostPort("::1", port)})
	p := startProxy(t, Options{Allow: allow})
	resp, _, tun := connect(t, p.addr, hostPort("::1", port))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	_, _ = tun.Write([]byte("v6"))
	_ = tun.(*net.TCPConn).CloseWrite()
	if b, _ := io.ReadAll(tun); string(b) != "v6" {
		t.Fatalf("echo %q", b)
	}
	if rec := p.waitRecords(t, 1)[0]; rec.Host != "::1" || rec.IP != "::1" || rec.Decision != DecisionAllow {
		t.Errorf("audit = %+v", rec)
	}
}

func TestResolutionFailureAndBadRequests(t *testing.T) {
	allow, _ := ParseAllowlist([]string{"missing.test:443", "ok.test:443"})
	p := startProxy(t, Options{Allow: allow, Resolver: newResolver(nil)})

	resp, body, _ := connect(t, p.addr, "missing.test:443")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "resolution failure: no such host") {
		t.Errorf("unresolvable: %d %q", resp.StatusCode, body)
	}
	resp, body, _ = connect(t, p.addr, "ok.test")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "missing port") {
		t.Errorf("CONNECT without port: %d %q", resp.StatusCode, body)
	}

	for _, tc := range []struct{ line, want string }{
		{"GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n", "not a proxy request"},
		{"GET https://ok.test/ HTTP/1.1\r\nHost: ok.test\r\n\r\n", "use CONNECT for https"},
	} {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, tc.line)
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		_ = c.Close()
		if r.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tc.want) {
			t.Errorf("%q: %d %q", tc.line, r.StatusCode, b)
		}
	}
	recs := p.waitRecords(t, 4)
	for _, r := range recs {
		if r.Decision != DecisionDeny {
			t.Errorf("audit = %+v", r)
		}
	}
}

func TestMaxConns(t *testing.T) {
	echo := startEcho(t)
	allow, _ := ParseAllowlist([]string{hostPort("127.0.0.1", echo.port())})
	p := startProxy(t, Options{Allow: allow, MaxConns: 1})

	resp, _, tun := connect(t, p.addr, hostPort("127.0.0.1", echo.port()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	r, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second connection: %d, want 503", r.StatusCode)
	}
	_ = tun.Close()
	// the slot is released when the tunnel closes
	waitFor(t, "slot released", func() bool {
		resp, _, tun := connect(t, p.addr, hostPort("127.0.0.1", echo.port()))
		if tun != nil {
			_ = tun.Close()
		}
		return resp.StatusCode == http.StatusOK
	})
}

func TestIdleTunnelIsClosed(t *testing.T) {
	echo := startEcho(t)
	allow, _ := ParseAllowlist([]string{hostPort("127.0.0.1", echo.port())})
	p := startProxy(t, Options{Allow: allow, IdleTimeout: 200 * time.Millisecond})
	resp, _, tun := connect(t, p.addr, hostPort("127.0.0.1", echo.port()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	testutil.Must(t, tun.SetReadDeadline(time.Now().Add(10*time.Second)))
	if _, err := io.ReadAll(tun); err != nil {
		t.Fatalf("idle tunnel was not closed by the proxy: %v", err)
	}
	if rec := p.waitRecords(t, 1)[0]; rec.Decision != DecisionAllow {
		t.Errorf("audit = %+v", rec)
	}
}

func TestShutdownClosesTunnelsAfterGrace(t *testing.T) {
	echo := startEcho(t)
	allow, _ := ParseAllowlist([]string{hostPort("127.0.0.1", echo.port())})
	srv, err := New(Options{Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	resp, _, tun := connect(t, ln.Addr().String(), hostPort("127.0.0.1", echo.port()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	testutil.Must(t, tun.SetReadDeadline(time.Now().Add(10*time.Second)))
	if _, err := io.ReadAll(tun); err != nil {
		t.Errorf("tunnel still open after Shutdown: %v", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Error("listener still accepting after Shutdown")
	}
}

// A dialer that lands somewhere other than the vetted address (here: the
// loopback echo server while 198.51.100.10 was vetted) is caught by the
// check of the connected peer.
func TestPeerCheckCatchesMisdirectedDial(t *testing.T) {
	echo := startEcho(t)
	public := netip.MustParseAddr("198.51.100.10")
	allow, _ := ParseAllowlist([]string{hostPort("odd.test", echo.port())})
	p := startProxy(t, Options{Allow: allow, AllowPrivate: []netip.Prefix{netip.PrefixFrom(public, 32)},
		Resolver: newResolver(map[string]string{"odd.test": public.String()})},
		func(s *Server) {
			s.dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, echo.ln.Addr().String())
			}
		})
	resp, body, _ := connect(t, p.addr, hostPort("odd.test", echo.port()))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "unvetted address 127.0.0.1") {
		t.Fatalf("%d %q, want 403 unvetted address", resp.StatusCode, body)
	}
	if rec := p.waitRecords(t, 1)[0]; rec.IP != "127.0.0.1" || rec.Decision != DecisionDeny {
		t.Errorf("audit = %+v", rec)
	}
}

// Bytes a client sends right behind the CONNECT (as TLS clients do with
// their ClientHello) reach the upstream, not the floor.
func TestConnectEarlyClientBytes(t *testing.T) {
	echo := startEcho(t)
	allow, _ := ParseAllowlist([]string{hostPort("127.0.0.1", echo.port())})
	p := startProxy(t, Options{Allow: allow})
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	target := hostPort("127.0.0.1", echo.port())
	_, _ = fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nearly-bytes", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	_ = resp.Body.Close() // the tunnel: closing reads nothing
	_ = c.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(br)
	if string(got) != "early-bytes" {
		t.Fatalf("echo %q, want %q", got, "early-bytes")
	}
	if rec := p.waitRecords(t, 1)[0]; rec.BytesUp != int64(len("early-bytes")) {
		t.Errorf("bytes_up = %d", rec.BytesUp)
	}
}
