package bridge

import (
	"net/netip"
	"slices"
	"testing"
)

func TestParseResolvConf(t *testing.T) {
	got := parseResolvConf("# comment\nnameserver 127.0.0.53\nnameserver 10.0.0.2\nnameserver fe80::1\nnameserver 10.0.0.2\nsearch x\nnameserver 192.168.1.1\n")
	want := []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("192.168.1.1")}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got := parseResolvConf("nameserver 127.0.0.53\n"); len(got) != 0 {
		t.Fatalf("loopback only: %v", got)
	}
}
