package proxy

import (
	"net/netip"
)

type specialRange struct {
	prefix netip.Prefix
	reason string
}

// specialRanges are the destinations the proxy refuses unless a range is
// exempted with AllowPrivate (or the exact IP is an allowlist entry). They
// are the IANA IPv4/IPv6 special-purpose registries' non-global entries plus
// the ranges that reach the host, its neighbours or a cloud's metadata
// service. More specific entries come first so the reason is the precise one.
var specialRanges = func() []specialRange {
	r := func(p, reason string) specialRange {
		return specialRange{netip.MustParsePrefix(p), reason}
	}
	return []specialRange{
		// IPv4
		r("0.0.0.0/8", "unspecified / this network (0.0.0.0/8)"),
		r("10.0.0.0/8", "private (RFC 1918, 10.0.0.0/8)"),
		r("100.64.0.0/10", "shared/CGNAT (RFC 6598, 100.64.0.0/10)"),
		r("127.0.0.0/8", "loopback (127.0.0.0/8)"),
		r("169.254.169.254/32", "cloud metadata service (169.254.169.254)"),
		r("169.254.0.0/16", "link-local (169.254.0.0/16)"),
		r("172.16.0.0/12", "private (RFC 1918, 172.16.0.0/12)"),
		r("192.0.0.0/24", "IETF protocol assignments (192.0.0.0/24)"),
		r("192.0.2.0/24", "documentation (TEST-NET-1)"),
		r("192.88.99.0/24", "6to4 relay anycast (192.88.99.0/24)"),
		r("192.168.0.0/16", "private (RFC 1918, 192.168.0.0/16)"),
		r("198.18.0.0/15", "benchmarking (198.18.0.0/15)"),
		r("198.51.100.0/24", "documentation (TEST-NET-2)"),
		r("203.0.113.0/24", "documentation (TEST-NET-3)"),
		r("224.0.0.0/4", "multicast (224.0.0.0/4)"),
		r("255.255.255.255/32", "broadcast"),
		r("240.0.0.0/4", "reserved (240.0.0.0/4)"),
		// IPv6 (IPv4-mapped addresses are unmapped and checked as IPv4)
		r("::/128", "unspecified (::)"),
		r("::1/128", "loopback (::1)"),
		r("::/96", "IPv4-compatible (deprecated, ::/96)"),
		r("64:ff9b:1::/48", "local-use NAT64 (64:ff9b:1::/48)"),
		r("100::/64", "discard-only (100::/64)"),
		r("2001:db8::/32", "documentation (2001:db8::/32)"),
		r("2001::/23", "IETF protocol assignments incl. Teredo (2001::/23)"),
		r("2002::/16", "6to4 (2002::/16)"),
		r("3fff::/20", "documentation (3fff::/20)"),
		r("5f00::/16", "SRv6 SIDs (5f00::/16)"),
		r("fd00:ec2::254/128", "cloud metadata service (fd00:ec2::254)"),
		r("fc00::/7", "unique local (fc00::/7)"),
		r("fe80::/10", "link-local (fe80::/10)"),
		r("fec0::/10", "site-local (deprecated, fec0::/10)"),
		r("ff00::/8", "multicast (ff00::/8)"),
	}
}()

var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")
	globalUnicast6 = netip.MustParsePrefix("2000::/3")
)

// SpecialRange reports why ip is not a public unicast address, or "" when it
// is one. NAT64 addresses (64:ff9b::/96) are judged by the IPv4 address they
// embed, since a NAT64 gateway would carry the connection there.
func SpecialRange(ip netip.Addr) string {
	ip = ip.Unmap()
	if !ip.IsValid() {
		return "invalid address"
	}
	if ip.Zone() != "" {
		return "scoped address"
	}
	if ip.Is6() && nat64WellKnown.Contains(ip) {
		b := ip.As16()
		v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		if r := SpecialRange(v4); r != "" {
			return "NAT64 of " + r
		}
		return ""
	}
	for _, s := range specialRanges {
		if s.prefix.Contains(ip) {
			return s.reason
		}
	}
	if ip.Is6() && !globalUnicast6.Contains(ip) {
		return "not IPv6 global unicast (outside 2000::/3)"
	}
	return ""
}
