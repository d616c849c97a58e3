package firewall

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestBuildBridge(t *testing.T) {
	s := BuildBridge(BridgeParams{Name: "meepa-bridge", Interface: "meepa-br0", Subnet: netip.MustParsePrefix("172.30.0.1/16")})
	lines := s.Lines()
	for _, want := range []string{
		"-N MB-meepa-bridge",
		"-N MBI-meepa-bridge",
		`-A MB-meepa-bridge -d 172.30.0.0/16 -i meepa-br0 -m comment --comment "meepa-bridge:meepa-bridge" -j DROP`,
		`-A MB-meepa-bridge -d 169.254.0.0/16 -i meepa-br0 -m comment --comment "meepa-bridge:meepa-bridge" -j DROP`,
		`-A MB-meepa-bridge -d 10.0.0.0/8 -i meepa-br0 -m comment --comment "meepa-bridge:meepa-bridge" -j DROP`,
		`-A MBI-meepa-bridge -i meepa-br0 -m comment --comment "meepa-bridge:meepa-bridge" -j DROP`,
		`-A DOCKER-USER -m comment --comment "meepa-bridge:meepa-bridge" -j MB-meepa-bridge`,
		`-A INPUT -m comment --comment "meepa-bridge:meepa-bridge" -j MBI-meepa-bridge`,
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("missing %q in\n%s", want, strings.Join(lines, "\n"))
		}
	}
	for _, ln := range lines {
		// Only take away: a mistake may narrow, never open.
		if strings.Contains(ln, "ACCEPT") {
			t.Errorf("rule accepts: %s", ln)
		}
		if strings.HasPrefix(ln, "-A ") && !strings.Contains(ln, `--comment "meepa-bridge:meepa-bridge"`) {
			t.Errorf("rule without the owner comment: %s", ln)
		}
	}
	// 198.18.0.0/15 stays reachable (the tests' outside server lives there).
	for _, p := range BridgeBlocked {
		if p.Overlaps(netip.MustParsePrefix("198.18.0.0/15")) {
			t.Errorf("%s blocks the benchmarking range", p)
		}
	}
	if got := Diff(s, Live{Chains: map[string][]string{}, Parents: map[string][]string{DockerUser: {}, Input: {}}}); len(got) == 0 {
		t.Error("an empty host shows no drift")
	}
	if text := ApplyText(s, Live{}); !strings.Contains(text, ":MB-meepa-bridge - [0:0]") || !strings.Contains(text, "-I DOCKER-USER 1 ") {
		t.Errorf("apply batch:\n%s", text)
	}
}

// The one opening in the bridge's set: DNS to the host's resolvers, as
// RETURN (Docker's rules still judge it) and before every DROP that would
// catch it, in both chains.
func TestBuildBridgeDNSComesFirst(t *testing.T) {
	s := BuildBridge(BridgeParams{Name: "meepa-bridge", Interface: "meepa-br0", Subnet: netip.MustParsePrefix("172.30.0.0/16"),
		DNS: []netip.Addr{netip.MustParseAddr("10.255.255.53")}})
	lines := s.Lines()
	for _, chain := range []string{"MB-meepa-bridge", "MBI-meepa-bridge"} {
		firstDrop, returns := -1, 0
		for i, ln := range lines {
			if !strings.HasPrefix(ln, "-A "+chain+" ") {
				continue
			}
			switch {
			case strings.HasSuffix(ln, "-j DROP") && firstDrop < 0:
				firstDrop = i
			case strings.Contains(ln, "-d 10.255.255.53/32") && strings.Contains(ln, "--dport 53") && strings.HasSuffix(ln, "-j RETURN"):
				if firstDrop >= 0 {
					t.Errorf("%s: DNS RETURN after a DROP: %s", chain, ln)
				}
				returns++
			}
		}
		if returns != 2 || firstDrop < 0 {
			t.Errorf("%s: %d DNS RETURNs (want udp and tcp), first DROP at %d:\n%s", chain, returns, firstDrop, strings.Join(lines, "\n"))
		}
	}
}
