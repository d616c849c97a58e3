package proxy

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"time"
)

// Brokered secrets.
//
// A runner registers a message's bound secrets with the proxy before the
// message starts (BindPath): each is a Binding of a placeholder the
// sandbox holds, the value it stands for, the hosts and the header it may
// be sent in. The body is sealed (AES-GCM) under a key derived from the
// agent's key, with the message id as associated data: only the agent's
// runner can register for it, and only for its own messages. The proxy
// keeps the bindings in memory until the message is revoked or its
// credential expires.
//
// A CONNECT of that message to a bound host is not tunnelled: the proxy
// answers the tool's TLS with a certificate for the host signed by the
// agent's CA (ca.go), reads each HTTP/1.1 request, puts the value in
// place of the placeholder in the bound header only, and forwards it
// over TLS that it verifies against the real host. The value in the
// response (a host that echoes what it got) goes back as the placeholder.
// Every other CONNECT stays an opaque tunnel, so the placeholder is worth
// nothing anywhere but where the owner bound it, and nothing at all once
// the message is over or to another agent.

// BindPath is where a runner registers a message's bindings: a POST to
// the proxy itself, authorized by the message's credential, whose body
// is Seal's output. It answers 204.
const BindPath = "/meepa/egress/bind"

// CAPath answers a GET, authorized by a credential, with the PEM of the
// credential's agent's CA: what the agent's sandbox trusts for bound hosts.
const CAPath = "/meepa/egress/ca"

// DecisionBind is the audit decision of a registration.
const DecisionBind = "bind"

// maxBindBody bounds a registration's sealed body.
const maxBindBody = 256 << 10

// Binding is one bound secret of one message.
type Binding struct {
	// Name is the secret's name (for the audit; never its value).
	Name string `json:"name"`
	// Placeholder is what the sandbox holds instead of Value.
	Placeholder string `json:"placeholder"`
	Value       string `json:"value"`
	// Hosts are where it may be sent.
	Hosts Allowlist `json:"hosts"`
	// Header is the one header it is put in.
	Header string `json:"header"`
	// BasicUser, when set, means the header is basic authentication and
	// the placeholder is its password, for this user only.
	BasicUser string `json:"basic_user,omitempty"`
}

// check refuses a binding that could not be put in a header as it is.
func (b Binding) check() error {
	switch {
	case b.Name == "" || b.Placeholder == "" || b.Value == "":
		return errors.New("a binding needs a name, a placeholder and a value")
	case len(b.Placeholder) < 16:
		return fmt.Errorf("binding %s: placeholder too short to be unguessable", b.Name)
	case strings.ContainsAny(b.Value, "\r\n\x00") || strings.ContainsAny(b.Placeholder, "\r\n\x00"):
		return fmt.Errorf("binding %s: a header value cannot hold CR, LF or NUL", b.Name)
	case len(b.Hosts) == 0:
		return fmt.Errorf("binding %s: no hosts", b.Name)
	case b.Header == "" || strings.ContainsAny(b.Header, " :\r\n\x00"):
		return fmt.Errorf("binding %s: header %q is not a header name", b.Name, b.Header)
	}
	return nil
}

// NewPlaceholder makes a placeholder for the secret name: unguessable,
// fit for a header and an environment variable.
func NewPlaceholder(name string) (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("placeholder: %w", err)
	}
	return "meepa-placeholder-" + strings.ToLower(name) + "-" + hex.EncodeToString(b), nil
}

// sealKey is the registration key of an agent.
func sealKey(agentKey []byte) []byte {
	m := hmac.New(sha256.New, agentKey)
	m.Write([]byte("meepa-egress-seal"))
	return m.Sum(nil)
}

// Seal encrypts a message's bindings for the proxy.
func Seal(agentKey []byte, message string, binds []Binding) ([]byte, error) {
	plain, err := json.Marshal(binds)
	if err != nil {
		return nil, err
	}
	aead, err := sealAEAD(agentKey)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, plain, []byte(message)), nil
}

// unseal is Seal's inverse; it fails for another agent's key or message.
func unseal(agentKey []byte, message string, sealed []byte) ([]Binding, error) {
	aead, err := sealAEAD(agentKey)
	if err != nil {
		return nil, err
	}
	if len(sealed) < aead.NonceSize() {
		return nil, errors.New("sealed bindings too short")
	}
	plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], []byte(message))
	if err != nil {
		return nil, errors.New("sealed bindings do not open with this message's agent key")
	}
	var binds []Binding
	if err := json.Unmarshal(plain, &binds); err != nil {
		return nil, fmt.Errorf("bindings: %w", err)
	}
	return binds, nil
}

func sealAEAD(agentKey []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(sealKey(agentKey))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// broker is a proxy's brokered-secret state.
type broker struct {
	key   []byte         // the topology's egress key
	roots *x509.CertPool // what upstream certificates must chain to; nil: the system's
	cas   *authorities

	mu   sync.Mutex
	msgs map[string]registration // by msgKey
}

type registration struct {
	expiry time.Time
	binds  []Binding
}

// register keeps c's bindings until its expiry; a message registers once.
func (b *broker) register(c Claims, binds []Binding) error {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, r := range b.msgs {
		if now.After(r.expiry) {
			delete(b.msgs, k)
		}
	}
	if _, ok := b.msgs[msgKey(c)]; ok {
		return errors.New("this message has registered its bindings already")
	}
	b.msgs[msgKey(c)] = registration{expiry: time.Unix(c.Expiry, 0), binds: binds}
	return nil
}

// forget drops c's bindings (its message ended).
func (b *broker) forget(c Claims) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.msgs, msgKey(c))
}

// bound are c's bindings for target; none for a plain tunnel.
func (b *broker) bound(c Claims, t Target) []Binding {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.msgs[msgKey(c)]
	if !ok || time.Now().After(r.expiry) {
		return nil
	}
	var out []Binding
	for _, bd := range r.binds {
		if _, ok := bd.Hosts.Match(t); ok {
			out = append(out, bd)
		}
	}
	return out
}

// bind handles a registration.
func (s *Server) bind(w http.ResponseWriter, r *http.Request, rec *AuditRecord, c Claims) {
	fail := func(status int, why string) {
		s.refuse(w, rec, &refusal{status: status, reason: "bindings refused: " + why}, BindPath)
	}
	if s.broker == nil {
		fail(http.StatusNotImplemented, "this proxy brokers no secrets (no egress key)")
		return
	}
	sealed, err := io.ReadAll(io.LimitReader(r.Body, maxBindBody+1))
	if err != nil || len(sealed) > maxBindBody {
		fail(http.StatusBadRequest, "body unreadable or too large")
		return
	}
	binds, err := unseal(AgentKey(s.broker.key, c.Agent), c.Message, sealed)
	if err != nil {
		fail(http.StatusForbidden, err.Error())
		return
	}
	names := make([]string, 0, len(binds))
	for _, b := range binds {
		if err := b.check(); err != nil {
			fail(http.StatusBadRequest, err.Error())
			return
		}
		names = append(names, sanitizeText(b.Name))
	}
	if err := s.broker.register(c, binds); err != nil {
		fail(http.StatusConflict, err.Error())
		return
	}
	rec.Decision, rec.Status = DecisionBind, http.StatusNoContent
	rec.Reason = "registered brokered secrets " + strings.Join(names, ",")
	w.WriteHeader(http.StatusNoContent)
}

// caPEM answers the agent's CA.
func (s *Server) caPEM(w http.ResponseWriter, rec *AuditRecord, c Claims) {
	if s.broker == nil {
		s.refuse(w, rec, &refusal{status: http.StatusNotImplemented, reason: "this proxy brokers no secrets (no egress key)"}, CAPath)
		return
	}
	ca, err := s.broker.cas.of(c.Agent)
	if err != nil {
		s.refuse(w, rec, &refusal{status: http.StatusInternalServerError, reason: err.Error()}, CAPath)
		return
	}
	rec.Decision, rec.Status, rec.Reason = DecisionAllow, http.StatusOK, "agent CA"
	w.Header().Set("Content-Type", "application/x-pem-file")
	_, _ = w.Write(ca.pem)
}

// substitute puts each binding's value where its placeholder stands in
// its header, and nowhere else; it returns the bindings it used.
func substitute(h http.Header, binds []Binding) []Binding {
	var used []Binding
	for _, b := range binds {
		vals := h[textproto.CanonicalMIMEHeaderKey(b.Header)]
		hit := false
		for i, v := range vals {
			if b.BasicUser == "" {
				if strings.Contains(v, b.Placeholder) {
					vals[i], hit = strings.ReplaceAll(v, b.Placeholder, b.Value), true
				}
				continue
			}
			scheme, enc, _ := strings.Cut(v, " ")
			raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
			if !strings.EqualFold(scheme, "Basic") || err != nil {
				continue
			}
			if user, pass, _ := strings.Cut(string(raw), ":"); user == b.BasicUser && pass == b.Placeholder {
				vals[i], hit = "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+b.Value)), true
			}
		}
		if hit {
			used = append(used, b)
		}
	}
	return used
}

// unsubstituter turns used values back into their placeholders.
func unsubstituter(used []Binding) *strings.Replacer {
	pairs := make([]string, 0, 2*len(used))
	for _, b := range used {
		pairs = append(pairs, b.Value, b.Placeholder)
	}
	return strings.NewReplacer(pairs...)
}

// brokered serves a bound host's tunnel: TLS to the tool with the agent's
// CA, TLS to the host verified against its real name, and each request in
// between with the bound values put in. It fills rec's outcome.
func (s *Server) brokered(rec *AuditRecord, c Claims, client, upstream net.Conn, target Target, binds []Binding) {
	leaf, err := s.broker.cas.leaf(c.Agent, target)
	if err != nil {
		rec.Decision, rec.Status, rec.Reason = DecisionError, http.StatusInternalServerError, "brokered: "+err.Error()
		return
	}
	tc := tls.Server(client, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	_ = tc.SetDeadline(time.Now().Add(s.opts.DialTimeout))
	if err := tc.Handshake(); err != nil {
		rec.Decision, rec.Status, rec.Reason = DecisionDeny, http.StatusOK, "brokered: the client's TLS failed (does it trust the agent's CA?): "+err.Error()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	name := target.Host
	uc := tls.Client(upstream, &tls.Config{ServerName: name, RootCAs: s.broker.roots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	_ = uc.SetDeadline(time.Now().Add(s.opts.DialTimeout))
	if err := uc.Handshake(); err != nil {
		rec.Decision, rec.Status, rec.Reason = DecisionError, http.StatusBadGateway, "brokered: upstream TLS: "+err.Error()
		writeStatus(tc, http.StatusBadGateway, "meepa proxy: upstream TLS of "+target.String()+" failed verification\n")
		return
	}
	_ = uc.SetDeadline(time.Time{})
	rec.Decision, rec.Status, rec.Reason = DecisionAllow, http.StatusOK, "allowed; brokered"
	names := map[string]bool{}
	cr, ur := bufio.NewReader(tc), bufio.NewReader(uc)
	for n := 0; ; n++ {
		req, err := http.ReadRequest(cr)
		if err != nil {
			break // the client is done (or sent no HTTP/1.1): the tunnel ends
		}
		if why := misdirected(req, target); why != "" {
			// A Host header for another name would let a shared front
			// (a CDN) route the value to someone else's origin.
			rec.Reason = "brokered; refused a request for another host: " + why
			writeStatus(tc, http.StatusMisdirectedRequest, "meepa proxy: "+why+"\n")
			break
		}
		used := substitute(req.Header, binds)
		for _, b := range used {
			names[sanitizeText(b.Name)] = true
		}
		// The value in a compressed answer could not be recognised on the
		// way back.
		req.Header.Set("Accept-Encoding", "identity")
		if err := req.Write(uc); err != nil {
			rec.Reason = "brokered; upstream write: " + err.Error()
			break
		}
		resp, err := http.ReadResponse(ur, req)
		if err != nil {
			rec.Reason = "brokered; upstream answer: " + err.Error()
			writeStatus(tc, http.StatusBadGateway, "meepa proxy: no answer from "+target.String()+"\n")
			break
		}
		rec.Status = resp.StatusCode
		if len(used) > 0 {
			back := unsubstituter(used)
			for _, vs := range resp.Header {
				for i := range vs {
					vs[i] = back.Replace(vs[i])
				}
			}
			resp.Body = &replacingReader{src: resp.Body, used: used}
			resp.ContentLength = -1
			resp.Header.Del("Content-Length")
			resp.TransferEncoding = []string{"chunked"}
		}
		err = resp.Write(tc)
		_ = resp.Body.Close()
		if err != nil || req.Close || resp.Close {
			break
		}
	}
	if len(names) > 0 {
		rec.Brokered = slices.Sorted(func(yield func(string) bool) {
			for k := range names {
				if !yield(k) {
					return
				}
			}
		})
	}
	_ = tc.Close()
}

// misdirected says why a request inside a bound host's tunnel is not for
// that host, or "".
func misdirected(req *http.Request, target Target) string {
	if req.URL.Host != "" && !sameAuthority(req.URL.Host, target) {
		return fmt.Sprintf("the request names %s, the tunnel is to %s", sanitizeText(req.URL.Host), target)
	}
	if !sameAuthority(req.Host, target) {
		return fmt.Sprintf("Host %s is not the tunnel's %s", sanitizeText(req.Host), target)
	}
	return ""
}

func sameAuthority(authority string, target Target) bool {
	t, err := ParseTarget(authority, target.Port)
	return err == nil && t.Host == target.Host && t.Port == target.Port
}

// writeStatus answers a bare HTTP/1.1 status with a text body.
func writeStatus(w io.Writer, status int, body string) {
	_, _ = fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// replacingReader streams src with every used value replaced by its
// placeholder, also across reads: it holds back the last len(value)-1
// bytes until more arrive.
type replacingReader struct {
	src  io.ReadCloser
	used []Binding
	in   []byte // read, not yet replaced
	out  []byte // replaced, not yet returned
	eof  bool
}

func (r *replacingReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		buf := make([]byte, 32<<10)
		n, err := r.src.Read(buf)
		r.in = append(r.in, buf[:n]...)
		switch {
		case errors.Is(err, io.EOF):
			r.eof = true
		case err != nil:
			return 0, err
		}
		r.flush()
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// flush moves what can no longer be the start of a value from in to out.
func (r *replacingReader) flush() {
	keep := 0
	if !r.eof {
		for _, b := range r.used {
			keep = max(keep, len(b.Value)-1)
		}
	}
	for {
		// The earliest occurrence of any value.
		at, which := -1, -1
		for i, b := range r.used {
			if j := strings.Index(string(r.in), b.Value); j >= 0 && (at < 0 || j < at) {
				at, which = j, i
			}
		}
		if at < 0 {
			break
		}
		r.out = append(r.out, r.in[:at]...)
		r.out = append(r.out, r.used[which].Placeholder...)
		r.in = r.in[at+len(r.used[which].Value):]
	}
	if cut := len(r.in) - keep; cut > 0 {
		r.out = append(r.out, r.in[:cut]...)
		r.in = r.in[cut:]
	}
}

func (r *replacingReader) Close() error { return r.src.Close() }
