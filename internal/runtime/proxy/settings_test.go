package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustAllow(t *testing.T, entries ...string) Allowlist {
	t.Helper()
	l, err := ParseAllowlist(entries)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestArgs(t *testing.T) {
	got := Args(Settings{
		ListenIP:     "172.30.1.2",
		Port:         3129,
		Allow:        append(mustAllow(t, "Example.COM", "*.api.example:8443"), mustAllow(t, "example.com:443")...),
		DNS:          []string{"172.30.2.1"},
		AllowPrivate: []string{"10.9.0.0/16"},
		MaxConns:     64,
		DialTimeout:  5 * time.Second,
		IdleTimeout:  time.Minute,
	})
	want := []string{"proxy", "--listen", "172.30.1.2:3129",
		"--allow", "example.com:443", "--allow", "*.api.example:8443",
		"--dns", "172.30.2.1", "--allow-private", "10.9.0.0/16", "--audit", "-",
		"--max-conns", "64", "--dial-timeout", "5s", "--idle-timeout", "1m0s"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Args =\n%q\nwant\n%q", got, want)
	}

	if got := Args(Settings{}); !reflect.DeepEqual(got, []string{"proxy", "--listen", ":3128", "--audit", "-"}) {
		t.Errorf("Args(zero) = %q", got)
	}
	if got := (Settings{ListenIP: "fd00::5"}).ListenAddr(); got != "[fd00::5]:3128" {
		t.Errorf("ListenAddr v6 = %q", got)
	}
}

func TestParseDNSServer(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.2":       "10.0.0.2:53",
		"10.0.0.2:5353":  "10.0.0.2:5353",
		"fd00::2":        "[fd00::2]:53",
		"[fd00::2]":      "[fd00::2]:53",
		"[fd00::2]:5353": "[fd00::2]:5353",
	} {
		got, err := ParseDNSServer(in)
		if err != nil || got.String() != want {
			t.Errorf("ParseDNSServer(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "dns.example", "10.0.0.2:0", "10.0.0.2:99999", "[fe80::1%eth0]:53"} {
		if got, err := ParseDNSServer(bad); err == nil {
			t.Errorf("ParseDNSServer(%q) = %v, want an error", bad, got)
		}
	}
}

// TestPatternText: a pattern travels as its canonical text, and text that
// does not parse is an error when read, not an entry kept as it was (Args
// used to pass an entry it could not parse on to the proxy's argv).
func TestPatternText(t *testing.T) {
	var got struct{ Allow Allowlist }
	if err := json.Unmarshal([]byte(`{"Allow":["Example.COM","*.api.example:8443","[::1]:80"]}`), &got); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(got)
	if err != nil || string(b) != `{"Allow":["example.com:443","*.api.example:8443","[::1]:80"]}` {
		t.Errorf("round trip = %s, %v", b, err)
	}
	for _, bad := range []string{`"https://evil/x"`, `"*"`, `"a.example:0"`, `""`} {
		var p Pattern
		if err := json.Unmarshal([]byte(bad), &p); err == nil {
			t.Errorf("unmarshal %s = %v, want an error", bad, p)
		}
	}
	if _, err := (Pattern{}).MarshalText(); err == nil {
		t.Error("the zero pattern marshalled")
	}
}

func TestParseUpstreamCA(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	kder, _ := x509.MarshalECPrivateKey(key)
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))

	if certs, err := ParseUpstreamCA(cert + cert); err != nil || len(certs) != 2 {
		t.Fatalf("two certificates: %d, %v", len(certs), err)
	}
	for name, tc := range map[string]struct{ in, want string }{
		"empty":    {"", "nothing else"},
		"not PEM":  {"hello", "nothing else"},
		"trailing": {cert + "junk", "nothing else"},
		"a key":    {cert + keyPEM, `"EC PRIVATE KEY" block`},
		"bad DER":  {string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("x")})), "certificate 1"},
	} {
		if _, err := ParseUpstreamCA(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	if pool, err := UpstreamRoots(cert); err != nil || pool == nil {
		t.Fatalf("UpstreamRoots: %v", err)
	}
	if pool, err := UpstreamRoots(" \n"); err != nil || pool != nil {
		t.Fatalf("UpstreamRoots(blank) = %v, %v; want the system's (nil)", pool, err)
	}
	if got := Args(Settings{UpstreamCA: cert}); !slices.Contains(got, "--upstream-ca") || got[len(got)-1] != cert {
		t.Errorf("Args with an upstream CA = %q", got)
	}
}
