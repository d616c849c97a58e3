package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults for Options' zero values.
const (
	DefaultDialTimeout     = 10 * time.Second
	DefaultIdleTimeout     = 5 * time.Minute
	DefaultMaxConns        = 512
	DefaultHeaderTimeout   = 10 * time.Second
	defaultMaxHeaderBytes  = 64 << 10
	defaultHTTPTargetPort  = 80
	deniedConnLingerPeriod = time.Second
	maxRejecting           = 32
)

// Resolver looks names up. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure a Server. The zero value of each field is its default.
type Options struct {
	// Allow is the allowlist; empty refuses everything.
	Allow Allowlist
	// AllowPrivate exempts these ranges from the special-range refusal
	// (loopback, RFC 1918, ULA, link-local, CGNAT, ...). Default: none.
	AllowPrivate []netip.Prefix
	// Resolver resolves names; default net.DefaultResolver (the system's
	// /etc/resolv.conf with the pure Go resolver in a static binary).
	Resolver Resolver
	// DialTimeout bounds resolution plus connection setup. Default 10s.
	DialTimeout time.Duration
	// IdleTimeout closes a tunnel or upstream connection after this long
	// without a byte in either direction, and idle client keep-alives.
	// Default 5m.
	IdleTimeout time.Duration
	// MaxConns bounds concurrent client connections; a connection over the
	// bound gets a 503 and is closed. Default 512.
	MaxConns int
	// Audit receives one JSON line per request. Default: discarded.
	Audit io.Writer
	// Logger gets operational messages (not the audit). Default: discarded.
	Logger hclog.Logger
}

// Server is the allowlist forward proxy. Create it with New.
type Server struct {
	opts  Options
	audit *auditLog
	log   hclog.Logger
	http  *http.Server

	// dial connects to one already-vetted address; tests replace it to
	// observe dial targets. The default re-checks the address in the
	// socket's Control hook.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)

	tunnels  sync.WaitGroup
	mu       sync.Mutex
	hijacked map[net.Conn]struct{}
	closing  bool // under mu: Shutdown's deadline passed
}

// New checks the options and builds a Server.
func New(opts Options) (*Server, error) {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.Audit == nil {
		opts.Audit = io.Discard
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	for _, p := range opts.AllowPrivate {
		if !p.IsValid() {
			return nil, errors.New("proxy: invalid allow-private prefix")
		}
	}
	s := &Server{
		opts:     opts,
		audit:    &auditLog{w: opts.Audit},
		log:      opts.Logger,
		hijacked: map[net.Conn]struct{}{},
	}
	d := &net.Dialer{
		Timeout:        opts.DialTimeout,
		ControlContext: s.controlDial,
	}
	s.dial = d.DialContext
	s.http = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: DefaultHeaderTimeout,
		IdleTimeout:       opts.IdleTimeout,
		MaxHeaderBytes:    defaultMaxHeaderBytes,
		ErrorLog:          opts.Logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	return s, nil
}

// Serve accepts connections on ln until Shutdown. It returns
// http.ErrServerClosed after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	lim := &limitListener{Listener: ln, sem: make(chan struct{}, s.opts.MaxConns), rejecting: make(chan struct{}, maxRejecting), s: s}
	return s.http.Serve(lim)
}

// Shutdown stops accepting, lets open requests and tunnels finish until ctx
// ends, then closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	done := make(chan struct{})
	go func() { s.tunnels.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.mu.Lock()
		s.closing = true
		for c := range s.hijacked {
			c.Close()
		}
		s.mu.Unlock()
		<-done
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// http.Server gave up on idle-but-open client connections; they are
		// closed now, which is what a deadline means here.
		s.http.Close()
		return nil
	}
	return err
}

// refusal is a policy or request error turned into an HTTP answer.
type refusal struct {
	status int
	reason string
	ip     string
}

func (r *refusal) Error() string { return r.reason }

// ServeHTTP handles CONNECT tunnels and absolute-URI plain HTTP requests.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := AuditRecord{
		Time:   start.UTC().Format(time.RFC3339Nano),
		Client: r.RemoteAddr,
		Method: sanitizeMethod(r.Method),
	}
	defer func() {
		rec.DurationMS = durationMS(time.Since(start))
		if err := s.audit.write(rec); err != nil {
			s.log.Error("audit write failed", "error", err)
		}
	}()

	var target Target
	var err error
	if r.Method == http.MethodConnect {
		target, err = ParseTarget(r.Host, 0)
	} else {
		target, err = s.plainTarget(r)
	}
	if err != nil {
		s.refuse(w, &rec, &refusal{status: http.StatusBadRequest, reason: "bad request: " + err.Error()}, r.Host)
		return
	}
	rec.Host, rec.Port = target.Host, target.Port
	if _, ok := s.opts.Allow.Match(target); !ok {
		s.refuse(w, &rec, &refusal{status: http.StatusForbidden, reason: "not in allowlist"}, target.String())
		return
	}
	upstream, ip, err := s.connect(r.Context(), target)
	rec.IP = ip
	if err != nil {
		var ref *refusal
		if errors.As(err, &ref) {
			s.refuse(w, &rec, ref, target.String())
			return
		}
		s.refuse(w, &rec, &refusal{status: http.StatusBadGateway, reason: err.Error()}, target.String())
		return
	}
	if r.Method == http.MethodConnect {
		s.tunnel(w, &rec, upstream)
	} else {
		s.forward(w, r, &rec, upstream)
	}
}

func (s *Server) plainTarget(r *http.Request) (Target, error) {
	if r.URL.Scheme == "" || r.URL.Host == "" {
		return Target{}, errors.New("not a proxy request (need an absolute http:// URI or CONNECT)")
	}
	if !strings.EqualFold(r.URL.Scheme, "http") {
		return Target{}, fmt.Errorf("scheme %q is not forwarded; use CONNECT for https", r.URL.Scheme)
	}
	return ParseTarget(r.URL.Host, defaultHTTPTargetPort)
}

func (s *Server) refuse(w http.ResponseWriter, rec *AuditRecord, ref *refusal, what string) {
	rec.Status = ref.status
	rec.Reason = ref.reason
	if ref.ip != "" {
		rec.IP = ref.ip
	}
	rec.Decision = DecisionDeny
	if ref.status >= 500 {
		rec.Decision = DecisionError
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Connection", "close")
	w.WriteHeader(ref.status)
	fmt.Fprintf(w, "meepa proxy: refused %s: %s\n", sanitizeText(what), ref.reason)
}

// connect resolves the target, keeps only addresses the policy permits and
// dials exactly those, one by one. It returns the connection and the IP it
// connected to (or the refused one).
func (s *Server) connect(ctx context.Context, t Target) (net.Conn, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.DialTimeout)
	defer cancel()

	var addrs []netip.Addr
	explicit := false
	if t.IP.IsValid() {
		// An IP-literal allowlist entry names its address on purpose, so it
		// is exempt from the special-range refusal (only that exact IP).
		addrs, explicit = []netip.Addr{t.IP}, true
	} else {
		// Rooted, so a resolv.conf search list never turns "intranet" into
		// "intranet.corp.example": the client asked for this exact name.
		found, err := s.opts.Resolver.LookupNetIP(ctx, "ip", t.Host+".")
		if err != nil {
			return nil, "", &refusal{status: http.StatusForbidden, reason: "resolution failure: " + resolveErr(err)}
		}
		if len(found) == 0 {
			return nil, "", &refusal{status: http.StatusForbidden, reason: "resolution failure: no addresses"}
		}
		for _, a := range found {
			addrs = append(addrs, a.Unmap().WithZone(""))
		}
	}

	var permitted []netip.Addr
	var firstRefusal *refusal
	for _, a := range addrs {
		if why := s.refusedRange(a, explicit); why != "" {
			if firstRefusal == nil {
				firstRefusal = &refusal{status: http.StatusForbidden, reason: "private address " + a.String() + ": " + why, ip: a.String()}
			}
			s.log.Debug("skipping refused address", "host", t.Host, "ip", a.String(), "range", why)
			continue
		}
		permitted = append(permitted, a)
	}
	if len(permitted) == 0 {
		return nil, "", firstRefusal
	}

	var errs []error
	for _, a := range permitted {
		addr := netip.AddrPortFrom(a, t.Port).String()
		conn, err := s.dial(context.WithValue(ctx, vettedKey{}, a), "tcp", addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// The Control hook vetted the address before connect; check the
		// connected socket's peer as well, so a dialer that somehow went
		// elsewhere is caught.
		var peer netip.Addr
		if tcp, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
			peer = tcp.AddrPort().Addr().Unmap().WithZone("")
		}
		if peer != a {
			conn.Close()
			return nil, peer.String(), &refusal{status: http.StatusForbidden, reason: "connected to an unvetted address " + peer.String(), ip: peer.String()}
		}
		return conn, a.String(), nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return nil, permitted[0].String(), fmt.Errorf("upstream unreachable: %s", strings.Join(msgs, "; "))
}

// refusedRange says why a is refused, or "" if it may be dialed.
func (s *Server) refusedRange(a netip.Addr, explicit bool) string {
	why := SpecialRange(a)
	if why == "" || explicit {
		return ""
	}
	for _, p := range s.opts.AllowPrivate {
		if p.Contains(a) {
			return ""
		}
	}
	return why
}

type vettedKey struct{}

// controlDial runs after the socket exists and before connect(2): the
// address must be the one connect vetted, and still pass the policy. It is
// the last line against a code path that dials a name (and so resolves it
// again, the DNS-rebinding hole).
func (s *Server) controlDial(ctx context.Context, network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("proxy: refusing to dial %q: not an IP address", address)
	}
	got := ap.Addr().Unmap().WithZone("")
	want, ok := ctx.Value(vettedKey{}).(netip.Addr)
	if !ok || got != want {
		return fmt.Errorf("proxy: refusing to dial %s: not the vetted address", got)
	}
	if why := SpecialRange(got); why != "" {
		// explicit (IP-literal) exemptions are already reflected in want;
		// a range exemption must still hold.
		if s.refusedRange(got, false) != "" && !s.explicitIP(got, ap.Port()) {
			return fmt.Errorf("proxy: refusing to dial %s: %s", got, why)
		}
	}
	return nil
}

func (s *Server) explicitIP(a netip.Addr, port uint16) bool {
	_, ok := s.opts.Allow.Match(Target{Host: a.String(), IP: a, Port: port})
	return ok
}

func (s *Server) tunnel(w http.ResponseWriter, rec *AuditRecord, upstream net.Conn) {
	defer upstream.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		rec.Decision, rec.Status, rec.Reason = DecisionError, http.StatusInternalServerError, "connection cannot be hijacked"
		http.Error(w, "meepa proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	// Counted before Hijack: while the handler runs, http.Server.Shutdown
	// still waits for this connection, so the count is never raised after
	// Shutdown has started waiting on it.
	s.tunnels.Add(1)
	defer s.tunnels.Done()
	client, buf, err := hj.Hijack()
	if err != nil {
		rec.Decision, rec.Status, rec.Reason = DecisionError, http.StatusInternalServerError, "hijack: "+err.Error()
		return
	}
	s.track(client, true)
	defer s.track(client, false)
	defer client.Close()

	rec.Decision, rec.Status, rec.Reason = DecisionAllow, http.StatusOK, "allowed"
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
		rec.Reason = "allowed; client gone before the tunnel opened"
		return
	}
	// The client may have sent its first bytes (a TLS ClientHello) right
	// behind the CONNECT; they sit in the server's buffer.
	var fromClient io.Reader = client
	if n := buf.Reader.Buffered(); n > 0 {
		pre, _ := buf.Reader.Peek(n)
		fromClient = io.MultiReader(bytes.NewReader(bytes.Clone(pre)), client)
	}
	act := &activity{}
	act.touch()
	up := idleConn{Conn: upstream, idle: s.opts.IdleTimeout, act: act}
	cl := idleConn{Conn: client, idle: s.opts.IdleTimeout, act: act}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		rec.BytesUp = pipe(up, readerWithIdle{fromClient, cl})
	}()
	go func() {
		defer wg.Done()
		rec.BytesDown = pipe(cl, up)
	}()
	wg.Wait()
}

// pipe copies src to dst until EOF or error, then half-closes dst so the
// other direction can finish; it returns the bytes copied.
func pipe(dst idleConn, src io.Reader) int64 {
	n, err := io.Copy(dst, src)
	if cw, ok := dst.Conn.(interface{ CloseWrite() error }); ok && err == nil {
		cw.CloseWrite()
	} else {
		// An error (idle timeout, reset) ends both directions.
		dst.Conn.Close()
		if c, ok := src.(interface{ Close() error }); ok {
			c.Close()
		}
	}
	return n
}

func (s *Server) forward(w http.ResponseWriter, r *http.Request, rec *AuditRecord, upstream net.Conn) {
	used := false
	conn := idleConn{Conn: upstream, idle: s.opts.IdleTimeout, act: &activity{}}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if used {
				return nil, errors.New("proxy: upstream connection already used")
			}
			used = true
			return conn, nil
		},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		ResponseHeaderTimeout:  s.opts.IdleTimeout,
		MaxResponseHeaderBytes: defaultMaxHeaderBytes * 4,
	}
	defer tr.CloseIdleConnections()
	defer upstream.Close()

	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme = "http"
	removeHopHeaders(out.Header)
	rc := http.NewResponseController(w)
	var body *countingReader
	if r.Body != nil && r.Body != http.NoBody {
		body = newCountingReader(r.Body, func() { rc.SetReadDeadline(time.Now().Add(s.opts.IdleTimeout)) })
		out.Body = body
		defer func() {
			upstream.Close() // ends a body write the upstream stopped reading
			rec.BytesUp = body.final(s.opts.IdleTimeout)
		}()
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		s.refuse(w, rec, &refusal{status: http.StatusBadGateway, reason: "upstream: " + err.Error()}, rec.Host)
		return
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	// A client that stops reading must not hold the upstream forever.
	n, err := io.Copy(deadlineWriter{w: w, rc: rc, idle: s.opts.IdleTimeout}, resp.Body)
	rec.BytesDown = n
	rec.Decision, rec.Status, rec.Reason = DecisionAllow, resp.StatusCode, "allowed"
	if err != nil {
		rec.Reason = "allowed; response cut short: " + err.Error()
	}
}

var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

func (s *Server) track(c net.Conn, add bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.closing {
			c.Close() // Shutdown's deadline has passed; no new tunnels
			return
		}
		s.hijacked[c] = struct{}{}
	} else {
		delete(s.hijacked, c)
	}
}

func resolveErr(err error) string {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		switch {
		case dnsErr.IsNotFound:
			return "no such host"
		case dnsErr.IsTimeout:
			return "timeout"
		}
		return dnsErr.Err
	}
	return err.Error()
}

// sanitizeMethod keeps the audit's method field to a token.
func sanitizeMethod(m string) string {
	if len(m) > 16 {
		m = m[:16]
	}
	return sanitizeText(m)
}

func sanitizeText(s string) string {
	if len(s) > 300 {
		s = s[:300]
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// activity is the last time a byte moved in either direction of one
// connection pair.
type activity struct{ last atomic.Int64 }

func (a *activity) touch()               { a.last.Store(time.Now().UnixNano()) }
func (a *activity) since() time.Duration { return time.Since(time.Unix(0, a.last.Load())) }

// idleConn extends its deadline on every read and write, and only gives up
// on a timeout when neither direction has moved for idle: a download that
// streams while the client sends nothing keeps the tunnel alive.
type idleConn struct {
	net.Conn
	idle time.Duration
	act  *activity
}

func (c idleConn) Read(p []byte) (int, error) {
	for {
		c.Conn.SetReadDeadline(time.Now().Add(c.idle))
		n, err := c.Conn.Read(p)
		if n > 0 {
			c.act.touch()
		}
		if err != nil && n == 0 && isTimeout(err) && c.act.since() < c.idle {
			continue
		}
		return n, err
	}
}

func (c idleConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.act.touch()
	}
	return n, err
}

// readerWithIdle reads the client side of a tunnel: from the buffered
// prefix and then the connection, with the idle rule of idleConn.
type readerWithIdle struct {
	r    io.Reader
	conn idleConn
}

func (r readerWithIdle) Read(p []byte) (int, error) {
	for {
		r.conn.Conn.SetReadDeadline(time.Now().Add(r.conn.idle))
		n, err := r.r.Read(p)
		if n > 0 {
			r.conn.act.touch()
		}
		if err != nil && n == 0 && isTimeout(err) && r.conn.act.since() < r.conn.idle {
			continue
		}
		return n, err
	}
}

func (r readerWithIdle) Close() error { return r.conn.Conn.Close() }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// countingReader counts a forwarded request body. The Transport writes
// and closes it on its own goroutine, possibly after RoundTrip returned;
// closed tells when the count is final.
type countingReader struct {
	r      io.ReadCloser
	n      atomic.Int64
	before func()
	once   sync.Once
	closed chan struct{}
}

func newCountingReader(r io.ReadCloser, before func()) *countingReader {
	return &countingReader{r: r, before: before, closed: make(chan struct{})}
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.before()
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingReader) Close() error {
	err := c.r.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

// final waits (bounded) until the Transport is done with the body.
func (c *countingReader) final(wait time.Duration) int64 {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-c.closed:
	case <-t.C:
	}
	return c.n.Load()
}

// deadlineWriter extends the client connection's write deadline before
// every write of a forwarded response.
type deadlineWriter struct {
	w    io.Writer
	rc   *http.ResponseController
	idle time.Duration
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	d.rc.SetWriteDeadline(time.Now().Add(d.idle))
	return d.w.Write(p)
}

// limitListener bounds concurrent connections. Over the bound a client gets
// an immediate 503 instead of waiting unseen in the accept queue.
type limitListener struct {
	net.Listener
	sem       chan struct{}
	rejecting chan struct{}
	s         *Server
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
			return &limitedConn{Conn: c, release: func() { <-l.sem }}, nil
		default:
		}
		// Answering takes a goroutine each; under a flood, beyond a small
		// bound, drop the connection without an answer.
		select {
		case l.rejecting <- struct{}{}:
			go func() {
				defer func() { <-l.rejecting }()
				l.reject(c)
			}()
		default:
			c.Close()
		}
	}
}

func (l *limitListener) reject(c net.Conn) {
	start := time.Now()
	c.SetDeadline(time.Now().Add(deniedConnLingerPeriod))
	io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: 40\r\n\r\nmeepa proxy: too many open connections\r\n")
	c.Close()
	l.s.audit.write(AuditRecord{
		Time: start.UTC().Format(time.RFC3339Nano), Client: c.RemoteAddr().String(),
		Decision: DecisionDeny, Reason: "too many open connections", Status: http.StatusServiceUnavailable,
		DurationMS: durationMS(time.Since(start)),
	})
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes a TCP client so a tunnel can end one direction.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
