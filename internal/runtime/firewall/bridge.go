package firewall

import (
	"fmt"
	"net/netip"
)

// BridgeParams are the facts of the provider-managed bridge network that
// per-message containers with network = "bridge" join.
type BridgeParams struct {
	Name      string       // the Docker network's name
	Interface string       // its Linux bridge (com.docker.network.bridge.name)
	Subnet    netip.Prefix // its IPv4 subnet
	// DNS are the host's resolvers. Docker's embedded resolver forwards
	// a container's external queries to them from the container's own
	// network namespace (Docker 20.10 does), so a resolver on a private
	// address (a VPC's, a router's) would be dropped with the rest of
	// private space: port 53 to these addresses is let through.
	DNS []netip.Addr
}

// BridgeBlocked are the destinations a managed-bridge container may never
// reach: RFC 1918 and carrier-grade NAT space (the host's other networks,
// a VPN, other containers), link-local (cloud metadata at
// 169.254.169.254), loopback, "this network", multicast and the reserved
// block. 198.18.0.0/15 (benchmarking) is deliberately not in the list: it
// is not used for host services, and the tests put their "outside" server
// there.
var BridgeBlocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// BridgeComment is the owner comment of a managed bridge's rules.
func BridgeComment(name string) string { return "meepa-bridge:" + name }

// BridgeForwardChain and BridgeInputChain name the chains a managed bridge
// owns (iptables allows 28 characters; Docker network names here are short).
func BridgeForwardChain(name string) string { return "MB-" + name }

// BridgeInputChain is the chain for traffic from the bridge to the host.
func BridgeInputChain(name string) string { return "MBI-" + name }

// BuildBridge returns the rule set of a managed bridge. Like the ThreeGate
// chains it only takes away (DROP, and the implicit RETURN at the end of
// a chain), so Docker's own rules still decide everything else. Packets
// are matched by the bridge interface they arrive on, not by source
// address, so a container that changed its address is caught the same.
//
// MB-<name> (from DOCKER-USER, forwarded traffic): DROP from the bridge to
// every BridgeBlocked range and to the bridge's own subnet (container to
// container, on top of enable_icc=false). Replies to outside connections
// come in on another interface and are untouched.
//
// MBI-<name> (from INPUT, traffic to the host itself: the gateway address,
// any other address of the host): RETURN replies to connections the host
// opened, DROP everything else from the bridge. Docker's
// embedded DNS resolver listens inside each container's own network
// namespace (127.0.0.11), so this does not reach it.
func BuildBridge(p BridgeParams) Set {
	c := BridgeComment(p.Name)
	fwd, in := BridgeForwardChain(p.Name), BridgeInputChain(p.Name)
	s := Set{Owner: c, Chains: []string{fwd, in}}
	add := func(chain, spec string) {
		s.Rules = append(s.Rules, Rule{Chain: chain, Spec: fmt.Sprintf("%s -m comment --comment %q -j DROP", spec, c)})
	}
	// DNS to the host's resolvers, before the drops (RETURN: Docker's
	// rules still judge it).
	for _, chain := range []string{fwd, in} {
		for _, d := range p.DNS {
			for _, proto := range []string{"udp", "tcp"} {
				s.Rules = append(s.Rules, Rule{Chain: chain, Spec: fmt.Sprintf("-d %s -i %s -p %s -m %s --dport 53 -m comment --comment %q -j RETURN",
					netip.PrefixFrom(d, 32), p.Interface, proto, proto, c)})
			}
		}
	}
	dests := append([]netip.Prefix{p.Subnet.Masked()}, BridgeBlocked...)
	for _, d := range dests {
		add(fwd, fmt.Sprintf("-d %s -i %s", d, p.Interface))
	}
	// Replies to connections the host opened (a check of a container,
	// Docker's own proxy) come back this way; a container cannot open one.
	s.Rules = append(s.Rules, Rule{Chain: in, Spec: fmt.Sprintf("-i %s -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment %q -j RETURN", p.Interface, c)})
	add(in, "-i "+p.Interface)
	s.Jumps = []Jump{
		{Parent: DockerUser, Target: fwd, comment: c},
		{Parent: Input, Target: in, comment: c},
	}
	return s
}
