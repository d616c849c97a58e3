package proxy

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/httpbound"
)

// Defaults for Options' zero values.
const (
	DefaultDialTimeout    = 10 * time.Second
	DefaultIdleTimeout    = 5 * time.Minute
	DefaultMaxConns       = 512
	DefaultHeaderTimeout  = 10 * time.Second
	defaultMaxHeaderBytes = 64 << 10
	defaultHTTPTargetPort = 80
)

// Resolver looks names up. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure a Server. The zero value of each field is its default.
type Options struct {
	// Allow is the allowlist; empty refuses everything, unless AnyHost.
	Allow Allowlist
	// AnyHost lets every destination pass the allow list: a runner's own
	// broker for a host-mode agent, whose tools share its network and
	// reach what it reaches anyway. The special ranges are still refused
	// unless AllowPrivate covers them.
	AnyHost bool
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
	// Key is the topology's egress key (KeySize bytes). Set, every request
	// must carry a live per-message credential minted under it (else 407),
	// and the credential's Policy narrows Allow for that request. Nil: no
	// credentials (a proxy started by hand, or by an earlier release).
	// With a key the proxy also brokers secrets (broker.go).
	Key []byte
	// UpstreamRoots are what a bound host's certificate must chain to when
	// the proxy brokers a secret to it; nil: the system's roots.
	UpstreamRoots *x509.CertPool
}

// Server is the allowlist forward proxy. Create it with New.
type Server struct {
	opts   Options
	audit  *auditLog
	creds  *verifier // nil without Options.Key
	broker *broker   // nil without Options.Key
	log    hclog.Logger
	http   *http.Server

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
	if opts.Key != nil && len(opts.Key) != KeySize {
		return nil, fmt.Errorf("proxy: egress key of %d bytes, want %d", len(opts.Key), KeySize)
	}
	s := &Server{
		opts:     opts,
		audit:    &auditLog{w: opts.Audit},
		log:      opts.Logger,
		hijacked: map[net.Conn]struct{}{},
	}
	if opts.Key != nil {
		s.creds = newVerifier(opts.Key)
		s.broker = &broker{key: opts.Key, roots: opts.UpstreamRoots, cas: newAuthorities(opts.Key), msgs: map[string]registration{}}
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
	return httpbound.Serve(s.http, ln, s.opts.MaxConns, s.reject)
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
			_ = c.Close() // the tunnel's pipes end on it; nothing to report
		}
		s.mu.Unlock()
		<-done
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// http.Server gave up on idle-but-open client connections; they are
		// closed now, which is what a deadline means here.
		if err := s.http.Close(); err != nil {
			return fmt.Errorf("proxy close: %w", err)
		}
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
	var claims *Claims
	defer func() {
		rec.DurationMS = durationMS(time.Since(start))
		if claims != nil {
			s.creds.count(*claims, rec.Decision == DecisionDeny)
		}
		if err := s.audit.write(rec); err != nil {
			s.log.Error("audit write failed", "error", err)
		}
	}()

	// The target first, so that every line names what was asked for, a
	// request refused for its credential too.
	target, terr := s.target(r)
	if terr == nil {
		rec.Host, rec.Port = target.Host, target.Port
	}
	if s.creds != nil {
		c, err := s.credential(r, &rec)
		if r.URL.Host == "" && r.Method != http.MethodConnect {
			// Requests to the proxy itself: a runner's, about its message.
			switch {
			case r.Method == http.MethodPost && r.URL.Path == RevokePath && (err == nil || errors.Is(err, ErrRevokedCredential)):
				s.revoke(w, &rec, c)
				return
			case r.Method == http.MethodPost && r.URL.Path == BindPath && err == nil:
				s.bind(w, r, &rec, c)
				return
			case r.Method == http.MethodGet && r.URL.Path == CAPath && err == nil:
				s.caPEM(w, &rec, c)
				return
			}
		}
		if err != nil {
			w.Header().Set("Proxy-Authenticate", `Basic realm="meepa-egress"`)
			s.refuse(w, &rec, &refusal{status: http.StatusProxyAuthRequired, reason: err.Error()}, r.Host)
			return
		}
		claims = &c
	}
	if terr != nil {
		s.refuse(w, &rec, &refusal{status: http.StatusBadRequest, reason: "bad request: " + terr.Error()}, r.Host)
		return
	}
	if _, ok := s.opts.Allow.Match(target); !ok && !s.opts.AnyHost {
		s.refuse(w, &rec, &refusal{status: http.StatusForbidden, reason: "not in allowlist"}, target.String())
		return
	}
	var cidrs []netip.Prefix
	if claims != nil {
		if why := claims.Policy.refuses(target); why != "" {
			s.refuse(w, &rec, &refusal{status: http.StatusForbidden, reason: why}, target.String())
			return
		}
		cidrs = claims.Policy.CIDRs
	}
	upstream, ip, err := s.connect(r.Context(), target, cidrs)
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
		var binds []Binding
		if claims != nil {
			binds = s.broker.bound(*claims, target)
		}
		s.tunnel(w, &rec, upstream, claims, target, binds)
	} else {
		s.forward(w, r, &rec, upstream)
	}
}

// credential verifies the request's credential and names its agent,
// role and message in the audit record (also for an expired or revoked
// one: the MAC held, so the names are true).
func (s *Server) credential(r *http.Request, rec *AuditRecord) (Claims, error) {
	user, cred, err := credentialOf(r.Header)
	if err != nil {
		return Claims{}, err
	}
	c, err := s.creds.verify(user, cred)
	if c.Agent != "" {
		rec.Agent, rec.Role, rec.Message = sanitizeText(c.Agent), sanitizeText(c.Role), sanitizeText(c.Message)
	}
	return c, err
}

// revoke ends the message of c and answers its counts.
func (s *Server) revoke(w http.ResponseWriter, rec *AuditRecord, c Claims) {
	n := s.creds.revoke(c)
	s.broker.forget(c)
	rec.Decision, rec.Status, rec.Reason = DecisionRevoke, http.StatusOK, fmt.Sprintf("revoked after %d requests (%d refused)", n.Requests, n.Refused)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	// The runner reads the counts; one gone before reading them loses them.
	_ = json.NewEncoder(w).Encode(n)
}

// target is what r asks for: a CONNECT's host:port, or a plain request's
// absolute URI.
func (s *Server) target(r *http.Request) (Target, error) {
	if r.Method == http.MethodConnect {
		return ParseTarget(r.Host, 0)
	}
	return s.plainTarget(r)
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
	// The refusal is already audited; a client gone before reading it
	// changes nothing.
	_, _ = fmt.Fprintf(w, "meepa proxy: refused %s: %s\n", sanitizeText(what), ref.reason)
}

// tunnel joins the client to upstream: an opaque pipe, or, for a host
// that binds some of the message's secrets, the broker (brokered).
func (s *Server) tunnel(w http.ResponseWriter, rec *AuditRecord, upstream net.Conn, claims *Claims, target Target, binds []Binding) {
	// Closing either end of a finished tunnel has nothing left to tell.
	defer func() { _ = upstream.Close() }()
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
	defer func() { _ = client.Close() }()

	rec.Decision, rec.Status, rec.Reason = DecisionAllow, http.StatusOK, "allowed"
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
		rec.Reason = "allowed; client gone before the tunnel opened"
		return
	}
	// The client may have sent its first bytes (a TLS ClientHello) right
	// behind the CONNECT; they sit in the server's buffer.
	var fromClient io.Reader = client
	if n := buf.Reader.Buffered(); n > 0 {
		pre, _ := buf.Peek(n)
		fromClient = io.MultiReader(bytes.NewReader(bytes.Clone(pre)), client)
	}
	act := &activity{}
	act.touch()
	up := idleConn{Conn: upstream, idle: s.opts.IdleTimeout, act: act}
	cl := idleConn{Conn: client, idle: s.opts.IdleTimeout, act: act}
	if len(binds) > 0 {
		in, out := &counted{Conn: up}, &counted{Conn: readConn{cl, readerWithIdle{fromClient, cl}}}
		s.brokered(rec, *claims, out, in, target, binds)
		rec.BytesUp, rec.BytesDown = in.wrote, out.wrote
		return
	}
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
	defer func() { _ = upstream.Close() }() // the exchange is over either way

	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme = "http"
	removeHopHeaders(out.Header)
	rc := http.NewResponseController(w)
	var body *countingReader
	if r.Body != nil && r.Body != http.NoBody {
		// Without read deadlines (not a net/http connection) the idle rule
		// still holds upstream.
		body = newCountingReader(r.Body, func() { _ = rc.SetReadDeadline(time.Now().Add(s.opts.IdleTimeout)) })
		out.Body = body
		defer func() {
			_ = upstream.Close() // ends a body write the upstream stopped reading
			rec.BytesUp = body.final(s.opts.IdleTimeout)
		}()
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		s.refuse(w, rec, &refusal{status: http.StatusBadGateway, reason: "upstream: " + err.Error()}, rec.Host)
		return
	}
	defer func() { _ = resp.Body.Close() }() // read-only
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
			_ = c.Close() // Shutdown's deadline has passed; no new tunnels
			return
		}
		s.hijacked[c] = struct{}{}
	} else {
		delete(s.hijacked, c)
	}
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
