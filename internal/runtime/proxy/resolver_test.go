package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// startDNS runs a UDP DNS server on 127.0.0.1 that answers A queries from
// names (rooted, lowercase) and NXDOMAIN for anything else.
func startDNS(t *testing.T, names map[string]string) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	var queries atomic.Int64
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var req dnsmessage.Message
			if err := req.Unpack(buf[:n]); err != nil || len(req.Questions) != 1 {
				continue
			}
			queries.Add(1)
			q := req.Questions[0]
			resp := dnsmessage.Message{
				Header:    dnsmessage.Header{ID: req.ID, Response: true, Authoritative: true, RecursionDesired: req.RecursionDesired, RecursionAvailable: true},
				Questions: req.Questions,
			}
			ip, ok := names[strings.ToLower(q.Name.String())]
			switch {
			case !ok:
				resp.RCode = dnsmessage.RCodeNameError
			case q.Type == dnsmessage.TypeA:
				resp.Answers = []dnsmessage.Resource{{
					Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1},
					Body:   &dnsmessage.AResource{A: netip.MustParseAddr(ip).As4()},
				}}
			}
			out, err := resp.Pack()
			if err == nil {
				pc.WriteTo(out, from)
			}
		}
	}()
	return netip.MustParseAddrPort(pc.LocalAddr().String()), &queries
}

func TestDNSResolverUsesConfiguredServers(t *testing.T) {
	srv, queries := startDNS(t, map[string]string{"dns.test.": "127.0.0.1"})
	// A first server that is not listening: the resolver moves on.
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := netip.MustParseAddrPort(dead.LocalAddr().String())
	dead.Close()

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
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	tun.Close()
	if rec := p.waitRecords(t, 1)[0]; rec.IP != "127.0.0.1" || rec.Host != "dns.test" {
		t.Errorf("audit = %+v", rec)
	}
}
