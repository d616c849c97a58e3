package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/testregistry"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

func TestRegistryConfigValidate(t *testing.T) {
	cases := []struct {
		cfg   RegistryConfig
		field string // "" = valid
	}{
		{RegistryConfig{Address: "registry.example.com"}, ""},
		{RegistryConfig{Address: "10.0.0.5:5000/meepa/images", Username: "u", Password: "p"}, ""},
		{RegistryConfig{Address: "127.0.0.1:5000", Token: "t", Insecure: true}, ""},
		{RegistryConfig{}, "address"},
		{RegistryConfig{Address: "http://127.0.0.1:5000"}, "address"},
		{RegistryConfig{Address: "user@registry.example.com"}, "address"},
		{RegistryConfig{Address: "registry.example.com/"}, "address"},
		{RegistryConfig{Address: "registry.example.com/Upper"}, "address"},
		{RegistryConfig{Address: "registry.example.com:port"}, "address"},
		{RegistryConfig{Address: "r.example.com", Token: "t", Username: "u", Password: "p"}, "token"},
		{RegistryConfig{Address: "r.example.com", Username: "u"}, "password"},
		{RegistryConfig{Address: "r.example.com", Password: "p"}, "username"},
		{RegistryConfig{Address: "r.example.com", Username: "a:b", Password: "p"}, "username"},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", c.cfg, err)
			}
			continue
		}
		var ce *fault.FieldError
		if !errors.As(err, &ce) || ce.Field != "registry."+c.field {
			t.Errorf("%s: error %v, want one on field %q", c.cfg, err, c.field)
		}
	}
}

func TestRegistryConfigPrintsNoCredentials(t *testing.T) {
	for _, c := range []RegistryConfig{
		{Address: "r.example.com", Username: "alice", Password: "pw-secret-1"},
		{Address: "r.example.com", Token: "tok-secret-2"},
	} {
		for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprintf("%q", c)} {
			if strings.Contains(s, "secret") {
				t.Errorf("printed config shows a credential: %s", s)
			}
			if !strings.Contains(s, "r.example.com") {
				t.Errorf("printed config does not name the registry: %s", s)
			}
		}
	}
}

func TestRemoteTag(t *testing.T) {
	c := RegistryConfig{Address: "10.0.0.5:5000/team", Insecure: true}
	good := map[string]string{
		"meepa-sandbox:3f9a1c2b4d5e":                             "10.0.0.5:5000/team/meepa-sandbox:3f9a1c2b4d5e",
		"meepagateway-isolated:0.1.0-meepa-sandbox-3f9a1c2b4d5e": "10.0.0.5:5000/team/meepagateway-isolated:0.1.0-meepa-sandbox-3f9a1c2b4d5e",
		"meepa-test/runner:abc":                                  "10.0.0.5:5000/team/meepa-test/runner:abc",
	}
	for local, want := range good {
		got, err := c.remoteTag(local)
		if err != nil || got.String() != want {
			t.Errorf("remoteTag(%q) = %v, %v; want %s", local, got, err, want)
		}
	}
	for _, local := range []string{"meepa-sandbox", "ghcr.io/bogpad/x:1", "localhost:5000/x:1", "x@sha256:" + strings.Repeat("a", 64), "X:1", "x:-bad"} {
		if got, err := c.remoteTag(local); err == nil {
			t.Errorf("remoteTag(%q) = %v, want an error", local, got)
		}
	}
}

// recorder counts the requests the pusher sends, by method and path.
type recorder struct {
	mu   sync.Mutex
	reqs []string
	next http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req.Method+" "+req.URL.String())
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

// writes are the requests that change the registry.
func (r *recorder) writes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var w []string
	for _, q := range r.reqs {
		if !strings.HasPrefix(q, "GET ") && !strings.HasPrefix(q, "HEAD ") {
			w = append(w, q)
		}
	}
	return w
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.reqs = nil
	r.mu.Unlock()
}

// lines is a logging.Logger that keeps every line with its arguments.
type lines struct {
	mu  sync.Mutex
	out []string
}

func (l *lines) add(level, msg string, args []any) {
	l.mu.Lock()
	l.out = append(l.out, fmt.Sprint(level, " ", msg, " ", args))
	l.mu.Unlock()
}
func (l *lines) Trace(m string, a ...any) { l.add("trace", m, a) }
func (l *lines) Debug(m string, a ...any) { l.add("debug", m, a) }
func (l *lines) Info(m string, a ...any)  { l.add("info", m, a) }
func (l *lines) Warn(m string, a ...any)  { l.add("warn", m, a) }
func (l *lines) Error(m string, a ...any) { l.add("error", m, a) }
func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.out, "\n")
}

const (
	testUser     = "meepa"
	testPassword = "pw-7c1d0e9b-never-logged"
	testToken    = "tok-5e2f8a31-never-logged"
)

// startRegistry serves a registry that wants testUser/testPassword or
// testToken, on a loopback port.
func startRegistry(t *testing.T) string {
	t.Helper()
	srv, addr, err := testregistry.Start("127.0.0.1:0", testregistry.Options{Username: testUser, Password: testPassword, Token: testToken})
	testutil.Must(t, err)
	testutil.Cleanup(t, "test registry", srv.Close)
	return addr
}

func newPusher(t *testing.T, reg RegistryConfig, log *lines) (*ImagePusher, *recorder) {
	t.Helper()
	if log == nil {
		log = &lines{}
	}
	p, err := NewImagePusher(nil, reg, log)
	testutil.Must(t, err)
	rec := &recorder{next: remote.DefaultTransport}
	return p.WithTransport(rec), rec
}

func mustTag(t *testing.T, reg RegistryConfig, local string) name.Tag {
	t.Helper()
	tag, err := reg.remoteTag(local)
	testutil.Must(t, err)
	return tag
}

// TestPushImage: the first push uploads and the registry serves the same
// manifest digest and layers back; a second push sends nothing; the same
// image under another tag costs one manifest and no blob.
func TestPushImage(t *testing.T) {
	ctx := context.Background()
	reg := RegistryConfig{Address: startRegistry(t) + "/meepa", Username: testUser, Password: testPassword, Insecure: true}
	log := &lines{}
	p, rec := newPusher(t, reg, log)
	img, err := random.Image(4096, 3)
	testutil.Must(t, err)
	want, err := img.Digest()
	testutil.Must(t, err)

	dst := mustTag(t, reg, "meepa-sandbox:0123456789ab")
	got, err := p.PushImage(ctx, img, dst)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Uploaded || got.Digest != want.String() || got.Ref != dst.Repository.Name()+"@"+want.String() || got.Tag != dst.String() {
		t.Fatalf("first push = %+v, want an upload of %s", got, want)
	}
	if !strings.HasPrefix(got.Ref, reg.Address+"/meepa-sandbox@sha256:") {
		t.Errorf("pinned reference %s is not <registry>/<repo>@sha256:…", got.Ref)
	}
	checkPulled(t, reg, got.Ref, img)

	rec.reset()
	again, err := p.PushImage(ctx, img, dst)
	if err != nil || again.Uploaded || again.Digest != got.Digest {
		t.Fatalf("second push = %+v, %v; want the same digest and no upload", again, err)
	}
	if w := rec.writes(); len(w) != 0 {
		t.Errorf("second push of an image the registry has sent %v", w)
	}

	rec.reset()
	other := mustTag(t, reg, "meepa-sandbox:ba9876543210")
	retag, err := p.PushImage(ctx, img, other)
	if err != nil || retag.Uploaded || retag.Digest != got.Digest {
		t.Fatalf("push under a new tag = %+v, %v; want the same digest and no upload", retag, err)
	}
	if w := rec.writes(); len(w) != 1 || !strings.HasPrefix(w[0], "PUT ") || !strings.Contains(w[0], "/manifests/ba9876543210") {
		t.Errorf("push under a new tag sent %v; want the one manifest PUT", w)
	}
	if d, err := remote.Head(other, p.remoteOptions(ctx)...); err != nil || d.Digest != want {
		t.Errorf("new tag resolves to %v, %v; want %s", d, err, want)
	}
	if strings.Contains(log.String(), testPassword) {
		t.Errorf("the log carries the password:\n%s", log)
	}
}

// checkPulled pulls ref back and compares digest, config and every layer.
func checkPulled(t *testing.T, reg RegistryConfig, ref string, want v1.Image) {
	t.Helper()
	r, err := name.NewDigest(ref, reg.nameOptions()...)
	testutil.Must(t, err)
	got, err := remote.Image(r, remote.WithAuth(reg.authenticator()))
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	gd, _ := got.Digest()
	wd, _ := want.Digest()
	gc, _ := got.ConfigName()
	wc, _ := want.ConfigName()
	if gd != wd || gc != wc {
		t.Fatalf("pulled %s: digest %s config %s; want %s and %s", ref, gd, gc, wd, wc)
	}
	gl, err := got.Layers()
	testutil.Must(t, err)
	wl, err := want.Layers()
	testutil.Must(t, err)
	if len(gl) != len(wl) {
		t.Fatalf("pulled %d layers, want %d", len(gl), len(wl))
	}
	for i := range gl {
		g, _ := gl[i].Digest()
		w, _ := wl[i].Digest()
		if g != w {
			t.Errorf("layer %d: pulled %s, want %s", i, g, w)
		}
		// The registry verified the blob's digest on upload; reading it
		// back checks the bytes served are those.
		rc, err := gl[i].Compressed()
		testutil.Must(t, err)
		if err := drain(rc); err != nil {
			t.Errorf("layer %d: %v", i, err)
		}
	}
}

// TestPushAuth: a token works as well as a password; no credentials and
// wrong ones fail with the registry's 401, and neither the error nor the
// log shows the password.
func TestPushAuth(t *testing.T) {
	ctx := context.Background()
	addr := startRegistry(t)
	img, err := random.Image(512, 1)
	testutil.Must(t, err)

	tokenReg := RegistryConfig{Address: addr, Token: testToken, Insecure: true}
	p, _ := newPusher(t, tokenReg, nil)
	if _, err := p.PushImage(ctx, img, mustTag(t, tokenReg, "meepa-sandbox:aaaaaaaaaaaa")); err != nil {
		t.Fatalf("push with a token: %v", err)
	}
	for _, reg := range []RegistryConfig{
		{Address: addr, Insecure: true},
		{Address: addr, Username: testUser, Password: testPassword + "-wrong", Insecure: true},
		{Address: addr, Token: testToken + "-wrong", Insecure: true},
	} {
		log := &lines{}
		p, _ := newPusher(t, reg, log)
		_, err := p.PushImage(ctx, img, mustTag(t, reg, "meepa-sandbox:bbbbbbbbbbbb"))
		if err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
			t.Errorf("%s: push error %v, want the registry's 401", reg, err)
			continue
		}
		for _, secret := range []string{testPassword, testToken} {
			if strings.Contains(err.Error(), secret) || strings.Contains(log.String(), secret) {
				t.Errorf("%s: a credential shows in the error or the log: %v\n%s", reg, err, log)
			}
		}
	}
}

// TestPushRefusesPlainHTTP: a loopback registry without insecure gets no
// request at all over HTTP (go-containerregistry would fall back to it and
// send the password in clear).
func TestPushRefusesPlainHTTP(t *testing.T) {
	reg := RegistryConfig{Address: startRegistry(t), Username: testUser, Password: testPassword}
	p, rec := newPusher(t, reg, nil)
	img, err := random.Image(512, 1)
	testutil.Must(t, err)
	_, err = p.PushImage(context.Background(), img, mustTag(t, reg, "meepa-sandbox:cccccccccccc"))
	if !errors.Is(err, ErrPlainHTTP) {
		t.Fatalf("push over plain HTTP without insecure: %v, want ErrPlainHTTP", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// The recorder sits under the TLS-only guard: whatever reached it went
	// out as https (and found no TLS listener).
	for _, q := range rec.reqs {
		if _, u, _ := strings.Cut(q, " "); !strings.HasPrefix(u, "https://") {
			t.Errorf("a request left without TLS: %s", q)
		}
	}
	if len(rec.reqs) == 0 {
		t.Errorf("no HTTPS attempt was made")
	}
}

func drain(rc io.ReadCloser) error {
	_, err := io.Copy(io.Discard, rc)
	return errors.Join(err, rc.Close())
}

func TestPublishedAndLocal(t *testing.T) {
	c := RegistryConfig{Address: "127.0.0.1:5000/agents", Insecure: true}
	pub, err := c.Published("meepagateway-isolated:0.1.0-meepa-sandbox-3f9a")
	if err != nil || pub != "127.0.0.1:5000/agents/meepagateway-isolated:0.1.0-meepa-sandbox-3f9a" {
		t.Fatalf("Published = %q, %v", pub, err)
	}
	if local, ok := c.Local(pub); !ok || local != "meepagateway-isolated:0.1.0-meepa-sandbox-3f9a" {
		t.Errorf("Local(%q) = %q, %v", pub, local, ok)
	}
	if _, ok := c.Local("other.example/meepagateway-isolated:x"); ok {
		t.Error("a ref of another registry was taken for ours")
	}
	if _, err := c.Published("registry.example/x:1"); err == nil {
		t.Error("a ref with a registry host was published again")
	}
}
