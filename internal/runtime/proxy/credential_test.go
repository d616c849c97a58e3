package proxy

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

// credProxy is a proxy with an egress key in front of two upstream names
// (a.test and b.test) on one loopback HTTP server.
type credProxy struct {
	*testProxy
	key  []byte
	port uint16
}

func startCredProxy(t *testing.T) *credProxy {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" {
			http.Error(w, "credential leaked upstream", http.StatusTeapot)
			return
		}
		_, _ = io.WriteString(w, "hello from "+r.Host)
	}))
	t.Cleanup(ts.Close)
	port := uint16(ts.Listener.Addr().(*net.TCPAddr).Port)
	allow, err := ParseAllowlist([]string{hostPort("a.test", port), hostPort("b.test", port), hostPort("127.0.0.1", port)})
	if err != nil {
		t.Fatal(err)
	}
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, Options{Allow: allow, AllowPrivate: loopbackOnly(), Key: key,
		Resolver: newResolver(map[string]string{"a.test": "127.0.0.1", "b.test": "127.0.0.1"})})
	return &credProxy{testProxy: p, key: key, port: port}
}

func (p *credProxy) mint(t *testing.T, c Claims) string {
	t.Helper()
	if c.Expiry == 0 {
		c.Expiry = time.Now().Add(time.Minute).Unix()
	}
	cred, err := Mint(AgentKey(p.key, c.Agent), c)
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

// get fetches http://host:port/ through the proxy as user:cred ("" for no
// userinfo) and returns the status.
func (p *credProxy) get(t *testing.T, host, user, cred string) int {
	t.Helper()
	pu := &url.URL{Scheme: "http", Host: p.addr}
	if user != "" {
		pu.User = url.UserPassword(user, cred)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(pu)}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + hostPort(host, p.port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode == http.StatusOK && !strings.HasPrefix(string(body), "hello from ") {
		t.Fatalf("body %q", body)
	}
	return resp.StatusCode
}

// revoke posts the runner's revoke and returns the message's counts.
func (p *credProxy) revoke(t *testing.T, user, cred string) (int, Counts) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+RevokePath, nil)
	req.SetBasicAuth(user, cred)
	req.Header.Set("Proxy-Authorization", req.Header.Get("Authorization"))
	req.Header.Del("Authorization")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var n Counts
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, n
}

func TestCredentialRequired(t *testing.T) {
	p := startCredProxy(t)
	good := p.mint(t, Claims{Agent: "alpha", Role: "fetch", Message: "m1"})
	forged, err := Mint(AgentKey([]byte(strings.Repeat("k", KeySize)), "alpha"), Claims{Agent: "alpha", Role: "fetch", Message: "m1", Expiry: time.Now().Add(time.Minute).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	// beta's runner holds only beta's key: a credential it makes for alpha
	// does not verify.
	other, _ := Mint(AgentKey(p.key, "beta"), Claims{Agent: "alpha", Role: "fetch", Message: "m1", Expiry: time.Now().Add(time.Minute).Unix()})
	expired := p.mint(t, Claims{Agent: "alpha", Role: "fetch", Message: "m0", Expiry: time.Now().Add(-time.Second).Unix()})

	for _, tc := range []struct {
		name, user, cred string
		want             int
	}{
		{"none", "", "", http.StatusProxyAuthRequired},
		{"forged", "alpha", forged, http.StatusProxyAuthRequired},
		{"another agent's key", "alpha", other, http.StatusProxyAuthRequired},
		{"user is not the agent", "beta", good, http.StatusProxyAuthRequired},
		{"tampered", "alpha", good[:len(good)-2] + "AA", http.StatusProxyAuthRequired},
		{"expired", "alpha", expired, http.StatusProxyAuthRequired},
		{"live", "alpha", good, http.StatusOK},
	} {
		if got := p.get(t, "a.test", tc.user, tc.cred); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
	// CONNECT carries it too.
	if r, _, _ := connect(t, p.addr, hostPort("a.test", p.port)); r.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("CONNECT without a credential: %d", r.StatusCode)
	}

	code, n := p.revoke(t, "alpha", good)
	if code != http.StatusOK || n.Requests != 1 || n.Refused != 0 {
		t.Errorf("revoke: %d %+v, want 200 and 1 request", code, n)
	}
	if got := p.get(t, "a.test", "alpha", good); got != http.StatusProxyAuthRequired {
		t.Errorf("after revoke: status %d, want 407", got)
	}
	if code, again := p.revoke(t, "alpha", good); code != http.StatusOK || again != n {
		t.Errorf("second revoke: %d %+v, want the same counts %+v", code, again, n)
	}
	if code, _ := p.revoke(t, "alpha", forged); code != http.StatusProxyAuthRequired {
		t.Errorf("revoke with a forged credential: %d, want 407", code)
	}

	recs := p.records(t)
	var named, anonymous int
	for _, r := range recs {
		// A refused credential still names what was asked for; only the
		// revokes (POSTs to the proxy itself) ask for no host.
		if r.Method != http.MethodPost && (r.Host != "a.test" || r.Port != p.port) {
			t.Errorf("audit line without its target: %+v", r)
		}
		switch {
		case r.Agent == "alpha" && r.Message != "":
			named++
		case r.Agent == "":
			anonymous++
		}
		if strings.Contains(p.audit.String(), good) {
			t.Fatal("the audit log holds a credential")
		}
	}
	// none, forged, another's, wrong user, tampered and the forged revoke
	// (and the CONNECT without one) verify no MAC: no names. The rest name
	// alpha and their message.
	if anonymous != 7 || named != len(recs)-7 {
		t.Errorf("audit: %d anonymous, %d named of %d:\n%s", anonymous, named, len(recs), p.audit.String())
	}
}

func TestCredentialPolicyPerAgent(t *testing.T) {
	p := startCredProxy(t)
	narrowA, errs := ParsePolicy([]string{hostPort("a.test", p.port)}, nil, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	denyB, errs := ParsePolicy(nil, []string{hostPort("a.test", p.port)}, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	cidrC, errs := ParsePolicy(nil, nil, []string{"127.0.0.2/32"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	credA := p.mint(t, Claims{Agent: "alpha", Role: "fetch", Message: "m1", Policy: narrowA})
	credB := p.mint(t, Claims{Agent: "beta", Role: "fetch", Message: "m2", Policy: denyB})
	credC := p.mint(t, Claims{Agent: "gamma", Role: "fetch", Message: "m3", Policy: cidrC})
	credD := p.mint(t, Claims{Agent: "delta", Role: "fetch", Message: "m4"})
	for _, tc := range []struct {
		who, user, cred, host string
		want                  int
	}{
		{"A's allow", "alpha", credA, "a.test", http.StatusOK},
		{"A narrowed", "alpha", credA, "b.test", http.StatusForbidden},
		{"B denies a", "beta", credB, "a.test", http.StatusForbidden},
		{"B keeps b", "beta", credB, "b.test", http.StatusOK},
		{"C's CIDR excludes 127.0.0.1", "gamma", credC, "a.test", http.StatusForbidden},
		{"D has the topology's list", "delta", credD, "b.test", http.StatusOK},
		{"D has the topology's list", "delta", credD, "a.test", http.StatusOK},
	} {
		if got := p.get(t, tc.host, tc.user, tc.cred); got != tc.want {
			t.Errorf("%s: %s: status %d, want %d", tc.who, tc.host, got, tc.want)
		}
	}
	if _, n := p.revoke(t, "alpha", credA); n.Requests != 2 || n.Refused != 1 {
		t.Errorf("A's counts %+v, want 2 requests, 1 refused", n)
	}
}

func TestNarrows(t *testing.T) {
	ceiling, _ := ParseAllowlist([]string{"*.example.com", "api.example.org:8443", "198.51.100.7"})
	private := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}
	for _, tc := range []struct {
		allow, cidrs []string
		bad          int
	}{
		{[]string{"a.example.com", "*.b.example.com", "api.example.org:8443", "198.51.100.7"}, []string{"8.8.8.0/24", "10.1.2.0/24"}, 0},
		{[]string{"example.com"}, nil, 1},               // the wildcard does not cover its apex
		{[]string{"*.example.com:8443"}, nil, 1},        // another port
		{[]string{"api.example.org"}, nil, 1},           // 443, not 8443
		{[]string{"evil.test", "198.51.100.8"}, nil, 2}, // outside
		{nil, []string{"10.0.0.0/8", "169.254.0.0/16"}, 2},
	} {
		p, errs := ParsePolicy(tc.allow, nil, tc.cidrs)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if got := Narrows(ceiling, private, p); len(got) != tc.bad {
			t.Errorf("%v %v: %d errors %v, want %d", tc.allow, tc.cidrs, len(got), got, tc.bad)
		}
	}
}

// BenchmarkCredential measures a plain forward request through a proxy
// with no key and the same request through a proxy with a key and a
// credential (verified, with a policy), interleaved request by request in
// the same run, and reports both and their ratio (verified/none): load on
// the machine falls on both alike.
func BenchmarkCredential(b *testing.B) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer ts.Close()
	port := uint16(ts.Listener.Addr().(*net.TCPAddr).Port)
	allow, _ := ParseAllowlist([]string{hostPort("127.0.0.1", port)})
	key, _ := NewKey()
	policy, _ := ParsePolicy([]string{hostPort("127.0.0.1", port)}, []string{"deny.example.com"}, nil)
	cred, err := Mint(AgentKey(key, "bench"), Claims{Agent: "bench", Role: "fetch", Message: "m", Expiry: time.Now().Add(time.Hour).Unix(), Policy: policy})
	if err != nil {
		b.Fatal(err)
	}
	client := func(k []byte) *http.Client {
		srv, err := New(Options{Allow: allow, AllowPrivate: loopbackOnly(), Key: k})
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = srv.Serve(ln) }()
		b.Cleanup(func() { _ = srv.http.Close() })
		pu := &url.URL{Scheme: "http", Host: ln.Addr().String()}
		if k != nil {
			pu.User = url.UserPassword("bench", cred)
		}
		tr := &http.Transport{Proxy: http.ProxyURL(pu)}
		b.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	none, verified := client(nil), client(key)
	target := "http://" + hostPort("127.0.0.1", port) + "/"
	get := func(c *http.Client) time.Duration {
		start := time.Now()
		resp, err := c.Get(target)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(start)
	}
	get(none)
	get(verified)
	var tNone, tVerified time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			tNone += get(none)
			tVerified += get(verified)
		} else {
			tVerified += get(verified)
			tNone += get(none)
		}
	}
	b.ReportMetric(float64(tNone.Nanoseconds())/float64(b.N), "none-ns/req")
	b.ReportMetric(float64(tVerified.Nanoseconds())/float64(b.N), "verified-ns/req")
	b.ReportMetric(float64(tVerified)/float64(tNone), "ratio")
}

// BenchmarkVerify is the verification alone of a credential seen before
// (every request of a message after its first).
func BenchmarkVerify(b *testing.B) {
	key, _ := NewKey()
	policy, _ := ParsePolicy([]string{"a.example.com", "*.b.example.com"}, []string{"x.b.example.com"}, []string{"8.8.8.0/24"})
	cred, _ := Mint(AgentKey(key, "bench"), Claims{Agent: "bench", Role: "fetch", Message: "m", Expiry: time.Now().Add(time.Hour).Unix(), Policy: policy})
	v := newVerifier(key)
	for i := 0; i < b.N; i++ {
		if _, err := v.verify("bench", cred); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyFirst is the verification of a credential not seen
// before (MAC and claims decoded; later requests hit the cache).
func BenchmarkVerifyFirst(b *testing.B) {
	key, _ := NewKey()
	policy, _ := ParsePolicy([]string{"a.example.com", "*.b.example.com"}, []string{"x.b.example.com"}, []string{"8.8.8.0/24"})
	cred, _ := Mint(AgentKey(key, "bench"), Claims{Agent: "bench", Role: "fetch", Message: "m", Expiry: time.Now().Add(time.Hour).Unix(), Policy: policy})
	v := newVerifier(key)
	for i := 0; i < b.N; i++ {
		clear(v.checked)
		if _, err := v.verify("bench", cred); err != nil {
			b.Fatal(err)
		}
	}
}
