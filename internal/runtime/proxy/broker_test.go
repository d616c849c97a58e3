package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

// fakeAPI is an HTTPS server with its own CA (httptest's, valid for
// example.com and 127.0.0.1) that records the credentials it receives and
// echoes Authorization back, in a header and in the body.
type fakeAPI struct {
	*httptest.Server
	port uint16
	mu   sync.Mutex
	got  []http.Header
	host []string
}

func startFakeAPI(t testing.TB) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	f.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.got, f.host = append(f.got, r.Header.Clone()), append(f.host, r.Host)
		f.mu.Unlock()
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		_, _ = io.WriteString(w, "you sent: "+r.Header.Get("Authorization")+" / "+r.Header.Get("X-Key"))
	}))
	t.Cleanup(f.Close)
	f.port = uint16(f.Listener.Addr().(*net.TCPAddr).Port)
	return f
}

func (f *fakeAPI) last() http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.got) == 0 {
		return nil
	}
	return f.got[len(f.got)-1]
}

func (f *fakeAPI) roots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(f.Certificate())
	return pool
}

// brokerSetup is a proxy with a key in front of the fake API as the bound
// host example.com and, unbound, as 127.0.0.1.
type brokerSetup struct {
	*testProxy
	api            *fakeAPI
	key            []byte
	bound, unbound string
}

func startBroker(t testing.TB, roots *x509.CertPool) *brokerSetup {
	t.Helper()
	api := startFakeAPI(t)
	bound, unbound := hostPort("example.com", api.port), hostPort("127.0.0.1", api.port)
	allow, err := ParseAllowlist([]string{bound, unbound})
	if err != nil {
		t.Fatal(err)
	}
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, Options{Allow: allow, AllowPrivate: loopbackOnly(), Key: key, UpstreamRoots: roots,
		Resolver: newResolver(map[string]string{"example.com": "127.0.0.1"})})
	if roots == nil {
		p.srv.broker.roots = api.roots()
	}
	return &brokerSetup{testProxy: p, api: api, key: key, bound: bound, unbound: unbound}
}

// message mints a live credential of agent's message and registers binds.
func (b *brokerSetup) message(t testing.TB, agent, msg string, binds ...Binding) Self {
	t.Helper()
	ak := AgentKey(b.key, agent)
	cred, err := Mint(ak, Claims{Agent: agent, Role: "fetch", Message: msg, Expiry: time.Now().Add(time.Minute).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	self := Self{Proxy: "http://" + b.addr, Agent: agent, Credential: cred}
	if len(binds) > 0 {
		if err := self.Register(context.Background(), ak, msg, binds); err != nil {
			t.Fatal(err)
		}
	}
	return self
}

// client is a tool of the message: its proxy variable carries the
// credential, and it trusts the agent's CA plus, for the opaque
// tunnels, the API's own.
func (b *brokerSetup) client(t testing.TB, self Self) *http.Client {
	t.Helper()
	pem, err := self.AgentCA(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pool := b.api.roots()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("agent CA %q is no PEM", pem)
	}
	pu := &url.URL{Scheme: "http", Host: b.addr, User: url.UserPassword(self.Agent, self.Credential)}
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func do(t testing.TB, c *http.Client, target string, edit func(*http.Request)) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "https://"+target+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	edit(req)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header, string(body)
}

const secretValue = "s3cret-VALUE-0123456789"

// TestBrokeredSecret: the bound host gets the value in the bound header
// only and its echo comes back as the placeholder; an unbound host,
// another header, another agent, another Host and an ended message get
// the placeholder or nothing.
func TestBrokeredSecret(t *testing.T) {
	b := startBroker(t, nil)
	ph, err := NewPlaceholder("TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	bound, _ := ParseAllowlist([]string{b.bound})
	self := b.message(t, "agent-a", "m1", Binding{Name: "TOKEN", Placeholder: ph, Value: secretValue, Hosts: bound, Header: "Authorization"})
	c := b.client(t, self)
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+ph) }

	status, h, body := do(t, c, b.bound, bearer)
	if got := b.api.last().Get("Authorization"); status != http.StatusOK || got != "Bearer "+secretValue {
		t.Fatalf("bound host: status %d, it received Authorization %q; want the value", status, got)
	}
	if strings.Contains(body, secretValue) || strings.Contains(h.Get("X-Echo"), secretValue) ||
		!strings.Contains(body, ph) || h.Get("X-Echo") != "Bearer "+ph {
		t.Fatalf("the echo of the value reached the tool: header %q body %q", h.Get("X-Echo"), body)
	}
	// The same connection again (keep-alive), with the placeholder in a
	// header the binding does not name.
	do(t, c, b.bound, func(r *http.Request) { bearer(r); r.Header.Set("X-Key", ph) })
	if got := b.api.last(); got.Get("X-Key") != ph || got.Get("Authorization") != "Bearer "+secretValue {
		t.Fatalf("unbound header: the API received X-Key %q, Authorization %q", got.Get("X-Key"), got.Get("Authorization"))
	}
	// An unbound host is an opaque tunnel: the placeholder goes as it is.
	do(t, c, b.unbound, bearer)
	if got := b.api.last().Get("Authorization"); got != "Bearer "+ph {
		t.Fatalf("unbound host received %q, want the placeholder", got)
	}
	// A Host header for another name inside the bound host's tunnel.
	status, _, _ = do(t, c, b.bound, func(r *http.Request) { bearer(r); r.Host = "elsewhere.example.net" })
	if status != http.StatusMisdirectedRequest {
		t.Fatalf("misdirected request: status %d, want 421", status)
	}
	// Another agent with the same placeholder: its tunnel is opaque, so
	// the API's own certificate answers and the placeholder arrives as is.
	oc := b.client(t, b.message(t, "agent-b", "m2"))
	do(t, oc, b.bound, bearer)
	if got := b.api.last().Get("Authorization"); got != "Bearer "+ph {
		t.Fatalf("another agent's request to the bound host carried %q, want the placeholder", got)
	}
	// After the message: the credential is refused outright.
	if _, err := self.Revoke(context.Background()); err != nil {
		t.Fatal(err)
	}
	pu := &url.URL{Scheme: "http", Host: b.addr, User: url.UserPassword(self.Agent, self.Credential)}
	tr := &http.Transport{Proxy: http.ProxyURL(pu)}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + b.bound + "/")
	if err == nil {
		_ = resp.Body.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "Proxy Authentication Required") {
		t.Fatalf("ended message: %v, want 407", err)
	}
	c.CloseIdleConnections() // a tunnel's line is written when it ends
	oc.CloseIdleConnections()
	n := 0
	for _, r := range b.waitRecords(t, 8) {
		if r.Agent == "agent-a" && r.Decision == DecisionAllow && r.Host == "example.com" {
			if strings.Join(r.Brokered, ",") != "TOKEN" {
				t.Errorf("audit of a brokered tunnel names %v, want [TOKEN]", r.Brokered)
			}
			n++
		}
		if line, _ := json.Marshal(r); bytes.Contains(line, []byte(secretValue)) {
			t.Fatalf("the audit holds the value: %s", line)
		}
	}
	if n == 0 {
		t.Fatal("no audit line for the brokered tunnel")
	}
}

// TestBrokeredBasicAuth: a basic-auth binding fills the password for its
// user only.
func TestBrokeredBasicAuth(t *testing.T) {
	b := startBroker(t, nil)
	ph, _ := NewPlaceholder("PASS")
	hosts, _ := ParseAllowlist([]string{b.unbound}) // an IP literal host: its leaf has the IP
	c := b.client(t, b.message(t, "agent-a", "m1", Binding{Name: "PASS", Placeholder: ph, Value: secretValue, Hosts: hosts, Header: "Authorization", BasicUser: "bot"}))
	for _, tc := range []struct{ user, want string }{{"bot", secretValue}, {"eve", ph}} {
		do(t, c, b.unbound, func(r *http.Request) { r.SetBasicAuth(tc.user, ph) })
		r := &http.Request{Header: b.api.last()}
		if u, p, _ := r.BasicAuth(); u != tc.user || p != tc.want {
			t.Errorf("user %s: the API received %s:%s, want %s:%s", tc.user, u, p, tc.user, tc.want)
		}
	}
}

// TestBrokeredUpstreamVerified: a bound host whose certificate does not
// chain to the proxy's roots never gets the value.
func TestBrokeredUpstreamVerified(t *testing.T) {
	b := startBroker(t, x509.NewCertPool()) // trusts nothing
	ph, _ := NewPlaceholder("TOKEN")
	bound, _ := ParseAllowlist([]string{b.bound})
	c := b.client(t, b.message(t, "agent-a", "m1", Binding{Name: "TOKEN", Placeholder: ph, Value: secretValue, Hosts: bound, Header: "Authorization"}))
	status, _, _ := do(t, c, b.bound, func(r *http.Request) { r.Header.Set("Authorization", ph) })
	if status != http.StatusBadGateway || b.api.last() != nil {
		t.Fatalf("unverified upstream: status %d, the API received %v; want 502 and nothing", status, b.api.last())
	}
}

// TestRegistration: only the agent's key opens a registration, for its
// own message, once; a binding fit for no header is refused.
func TestRegistration(t *testing.T) {
	b := startBroker(t, nil)
	hosts, _ := ParseAllowlist([]string{b.bound})
	ph, _ := NewPlaceholder("TOKEN")
	good := Binding{Name: "TOKEN", Placeholder: ph, Value: secretValue, Hosts: hosts, Header: "Authorization"}
	self := b.message(t, "agent-a", "m1")
	ak := AgentKey(b.key, "agent-a")
	for _, tc := range []struct {
		name string
		key  []byte
		msg  string
		bind Binding
		want string
	}{
		{"another agent's key", AgentKey(b.key, "agent-b"), "m1", good, "403"},
		{"another message", ak, "m2", good, "403"},
		{"a value with a line break", ak, "m1", Binding{Name: "T", Placeholder: ph, Value: "a\r\nX-Evil: 1", Hosts: hosts, Header: "Authorization"}, "400"},
		{"good", ak, "m1", good, ""},
		{"twice", ak, "m1", good, "409"},
	} {
		err := self.Register(context.Background(), tc.key, tc.msg, []Binding{tc.bind})
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestReplacingReader: values are replaced across read boundaries.
func TestReplacingReader(t *testing.T) {
	used := []Binding{{Value: "SECRET", Placeholder: "ph-1"}, {Value: "KEY", Placeholder: "ph-2"}}
	in := "aSECRETbKEYSECRETcSECRE"
	r := &replacingReader{src: io.NopCloser(iotest.OneByteReader(strings.NewReader(in))), used: used}
	out, err := io.ReadAll(r)
	if want := "aph-1bph-2ph-1cSECRE"; err != nil || string(out) != want {
		t.Fatalf("got %q, %v; want %q", out, err, want)
	}
}

// TestAgentCAStable: two proxies of one topology key have one CA per
// agent, and agents have different ones.
func TestAgentCAStable(t *testing.T) {
	key, _ := NewKey()
	a1, _ := newAuthorities(key).of("a")
	a2, _ := newAuthorities(key).of("a")
	b, _ := newAuthorities(key).of("b")
	if !a1.key.Equal(a2.key) || a1.key.Equal(b.key) {
		t.Fatal("the agent CA key is not one per agent and topology key")
	}
	leaf, err := newAuthorities(key).leaf("a", Target{Host: "example.com", Port: 443})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(a1.cert)
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "example.com"}); err != nil {
		t.Fatalf("a leaf of another proxy with the same key does not verify: %v", err)
	}
}

// BenchmarkBrokered: one HTTPS request on a fresh connection through a
// plain CONNECT tunnel (t) and through the broker (b), alternating; it
// reports b/t.
func BenchmarkBrokered(b *testing.B) {
	bs := startBroker(b, nil)
	ph, _ := NewPlaceholder("TOKEN")
	hosts, _ := ParseAllowlist([]string{bs.bound})
	self := bs.message(b, "bench", "m1", Binding{Name: "TOKEN", Placeholder: ph, Value: secretValue, Hosts: hosts, Header: "Authorization"})
	c := bs.client(b, self)
	c.Transport.(*http.Transport).DisableKeepAlives = true
	get := func(target string) time.Duration {
		start := time.Now()
		status, _, _ := do(b, c, target, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+ph) })
		if status != http.StatusOK {
			b.Fatalf("status %d", status)
		}
		return time.Since(start)
	}
	get(bs.bound)
	get(bs.unbound)
	var tunnel, brokered time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tunnel += get(bs.unbound)
		brokered += get(bs.bound)
	}
	b.ReportMetric(float64(tunnel.Microseconds())/float64(b.N), "tunnel-us/op")
	b.ReportMetric(float64(brokered.Microseconds())/float64(b.N), "brokered-us/op")
	b.ReportMetric(float64(brokered)/float64(tunnel), "brokered/tunnel")
}
