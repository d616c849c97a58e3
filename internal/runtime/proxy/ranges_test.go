package proxy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestSpecialRange(t *testing.T) {
	tests := []struct {
		ip   string
		want string // substring of the reason; "" means public
	}{
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"10.1.2.3", "RFC 1918"},
		{"172.16.0.1", "RFC 1918"},
		{"172.31.255.255", "RFC 1918"},
		{"192.168.1.1", "RFC 1918"},
		{"100.64.0.1", "CGNAT"},
		{"100.127.255.255", "CGNAT"},
		{"169.254.169.254", "cloud metadata"},
		{"169.254.1.1", "link-local"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "this network"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved"},
		{"192.0.0.8", "IETF"},
		{"192.0.2.1", "documentation"},
		{"198.18.0.1", "benchmarking"},
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:169.254.169.254", "cloud metadata"},
		{"::127.0.0.1", "IPv4-compatible"},
		{"fe80::1", "link-local"},
		{"fc00::1", "unique local"},
		{"fd12:3456::1", "unique local"},
		{"fd00:ec2::254", "cloud metadata"},
		{"ff02::1", "multicast"},
		{"fec0::1", "site-local"},
		{"2001:db8::1", "documentation"},
		{"2001::1", "Teredo"},
		{"2002:7f00:1::1", "6to4"},
		{"100::1", "discard"},
		{"64:ff9b::7f00:1", "NAT64 of loopback"},
		{"64:ff9b::a9fe:a9fe", "NAT64 of cloud metadata"},
		{"64:ff9b:1::1", "NAT64"},
		{"4000::1", "global unicast"},
		// public addresses: only compared, never dialed
		{"172.32.0.1", ""},
		{"100.128.0.1", ""},
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"64:ff9b::808:808", ""},
		{"2606:4700::1111", ""},
	}
	for _, tt := range tests {
		t.Run(tt.ip, func(t *testing.T) {
			got := SpecialRange(netip.MustParseAddr(tt.ip))
			if tt.want == "" {
				if got != "" {
					t.Fatalf("SpecialRange(%s) = %q, want public", tt.ip, got)
				}
				return
			}
			if !strings.Contains(got, tt.want) {
				t.Fatalf("SpecialRange(%s) = %q, want it to contain %q", tt.ip, got, tt.want)
			}
		})
	}
}

func TestRefusedRangeExemptions(t *testing.T) {
	s, err := New(Options{AllowPrivate: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}})
	if err != nil {
		t.Fatal(err)
	}
	if why := s.refusedRange(netip.MustParseAddr("10.1.2.3"), false); why != "" {
		t.Errorf("exempted range refused: %s", why)
	}
	if why := s.refusedRange(netip.MustParseAddr("10.2.0.1"), false); why == "" {
		t.Error("10.2.0.1 is outside the exemption but was allowed")
	}
	if why := s.refusedRange(netip.MustParseAddr("169.254.169.254"), true); why != "" {
		t.Errorf("explicit IP refused: %s", why)
	}
}
