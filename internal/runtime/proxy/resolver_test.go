package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

func TestDNSResolverUsesConfiguredServers(t *testing.T) {
	srv, queries := testutil.StartLoopbackDNS(t, map[string]string{"dns.test.": "127.0.0.1"})
	// A first server that is not listening: the resolver moves on.
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := netip.MustParseAddrPort(dead.LocalAddr().String())
	_ = dead.Close()

	r := NewDNSResolver([]netip.AddrPort{deadAddr, srv})
	addrs, err := r.LookupNetIP(context.Background(), "ip", "dns.test.")
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 1 || addrs[0].Unmap() != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("addrs = %v", addrs)
	}
	if queries.Load() == 0 {
		t.Fatal("the configured server was never asked")
	}
	_, err = r.LookupNetIP(context.Background(), "ip", "nope.test.")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("unknown name: %v, want not found", err)
	}

	// end to end: the proxy resolves through it
	echo := startEcho(t)
	allow, _ := ParseAllowlist([]string{hostPort("dns.test", echo.port())})
	p := startProxy(t, Options{Allow: allow, AllowPrivate: loopbackOnly(), Resolver: NewDNSResolver([]netip.AddrPort{srv})})
	resp, _, tun := connect(t, p.addr, hostPort("DNS.test.", echo.port()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	_ = tun.Close()
	if rec := p.waitRecords(t, 1)[0]; rec.IP != "127.0.0.1" || rec.Host != "dns.test" {
		t.Errorf("audit = %+v", rec)
	}
}
