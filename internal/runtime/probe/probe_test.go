package probe

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "close listener", func() error { return testutil.Gone(ln.Close()) })
	return ln
}

func TestTCP(t *testing.T) {
	ln := listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello\n"))
			_ = c.Close()
		}
	}()
	r := Run(context.Background(), Check{Kind: TCP, Target: ln.Addr().String()}, time.Second)
	if r.Observed != Open || r.Detail != "hello" {
		t.Errorf("open port: %+v", r)
	}
	closed := listen(t)
	addr := closed.Addr().String()
	_ = closed.Close()
	if r := Run(context.Background(), Check{Kind: TCP, Target: addr}, time.Second); r.Observed != Refused || Blocked(r.Observed) {
		t.Errorf("closed port must be refused (reachable), got %+v", r)
	}
}

// fakeProxy answers CONNECT with 200 and a banner for allowed.test with
// the credential, 407 without it, 403 for any other host.
func fakeProxy(t *testing.T) string {
	ln := listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer func() { _ = c.Close() }()
				buf := make([]byte, 512)
				n, _ := c.Read(buf)
				req := string(buf[:n])
				if strings.Contains(req, "CONNECT allowed.test:443") && !strings.Contains(req, "Proxy-Authorization: Basic cred") {
					_, _ = c.Write([]byte("HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"))
					return
				}
				if strings.Contains(req, "CONNECT allowed.test:443") {
					_, _ = c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\nbanner"))
					return
				}
				_, _ = c.Write([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"))
			}(c)
		}
	}()
	return ln.Addr().String()
}

func TestConnect(t *testing.T) {
	t.Setenv(EnvProxyAuthorization, "Basic cred")
	via := fakeProxy(t)
	r := Run(context.Background(), Check{Kind: Connect, Via: via, Target: "allowed.test:443"}, time.Second)
	if r.Observed != Allowed || r.Detail != "banner" {
		t.Errorf("allowed: %+v", r)
	}
	r = Run(context.Background(), Check{Kind: Connect, Via: via, Target: "other.test:443"}, time.Second)
	if r.Observed != Denied || !strings.Contains(r.Detail, "403") {
		t.Errorf("denied: %+v", r)
	}
	// connect-anon leaves the credential out.
	r = Run(context.Background(), Check{Kind: ConnectAnon, Via: via, Target: "allowed.test:443"}, time.Second)
	if r.Observed != AuthRequired || !strings.Contains(r.Detail, "407") {
		t.Errorf("no credential: %+v", r)
	}
}

func TestParseRoundTrip(t *testing.T) {
	for _, s := range []string{"tcp=10.0.0.1:22", "connect=10.0.0.2:3128/example.com:443", "connect-anon=10.0.0.2:3128/example.com:443", "dns=example.com", "dns-at=10.0.0.3:53/example.com."} {
		c, err := Parse(s)
		if err != nil || c.String() != s {
			t.Errorf("Parse(%q) = %+v, %v", s, c, err)
		}
	}
	for _, bad := range []string{"tcp", "udp=1.2.3.4:5", "connect=1.2.3.4:5", "dns-at=10.0.0.3:53", "dns-at=/example.com"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
