package bridge

import (
	"bufio"
	"net/netip"
	"os"
	"strings"
)

// Where the host keeps its resolvers. When /etc/resolv.conf lists only
// loopback addresses (systemd-resolved's stub), Docker reads the real
// upstreams from systemd-resolved's file instead, and so do we.
var resolvConfs = []string{"/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"}

// HostResolvers are the IPv4 resolvers Docker's embedded DNS forwards to
// on this host: the first of resolvConfs with a non-loopback nameserver.
// None found (no file, only loopback) means none: Docker then falls back
// to public resolvers, which the rules do not block.
func HostResolvers() []netip.Addr {
	for _, f := range resolvConfs {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if ns := parseResolvConf(string(raw)); len(ns) > 0 {
			return ns
		}
	}
	return nil
}

// parseResolvConf returns the non-loopback IPv4 nameservers, in order,
// without repeats.
func parseResolvConf(text string) []netip.Addr {
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil || !a.Is4() || a.IsLoopback() || seen[a] {
			continue
		}
		seen[a] = true
		out = append(out, a)
	}
	return out
}
