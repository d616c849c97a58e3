package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ParseDNSServer parses "ip" or "ip:port" ("[v6]:port" for IPv6); the
// port defaults to 53. Names are refused: the resolver's own address must
// not need resolving.
func ParseDNSServer(s string) (netip.AddrPort, error) {
	if strings.Contains(s, "%") {
		return netip.AddrPort{}, fmt.Errorf("dns server %q: IPv6 zones are not supported", s)
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 {
			return netip.AddrPort{}, fmt.Errorf("dns server %q: port 0 is not allowed", s)
		}
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	host := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if ip, err := netip.ParseAddr(host); err == nil && ip.Zone() == "" {
		return netip.AddrPortFrom(ip.Unmap(), 53), nil
	}
	return netip.AddrPort{}, fmt.Errorf("dns server %q: want an IP address with an optional port, e.g. 10.0.0.2 or 10.0.0.2:53 or [fd00::2]:53", s)
}

// NewDNSResolver returns a Resolver that sends its queries to the given
// servers, in order, with Go's own DNS client, instead of the nameservers in
// /etc/resolv.conf (Go still reads /etc/hosts and resolv.conf's options).
// With no servers it returns net.DefaultResolver.
func NewDNSResolver(servers []netip.AddrPort) Resolver {
	if len(servers) == 0 {
		return net.DefaultResolver
	}
	rs := make(multiResolver, len(servers))
	for i, srv := range servers {
		addr := srv.String()
		rs[i] = &net.Resolver{
			PreferGo: true,
			Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			},
		}
	}
	return rs
}

// multiResolver tries each server until one answers; "no such host" from a
// server is an answer, not a reason to ask the next.
type multiResolver []*net.Resolver

func (m multiResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	var errs []error
	for _, r := range m {
		addrs, err := r.LookupNetIP(ctx, network, host)
		if err == nil {
			return addrs, nil
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return nil, err
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}
