// Package topology is ThreeGate on a Docker host: the plan (the three
// networks and their subnets, the pinned addresses of the egress proxy, the
// roles and which networks each may join, and the validation of all of it,
// as fault.List with attribute paths) and the Service, the Docker
// topospec.Backend, that brings a planned topology up on Docker and the
// host firewall, reads it back, verifies it, imports it and tears it down.
// This file is the plan: pure data, no Docker or iptables.
package topology

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strings"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// RoleNetworks is the membership rule of the spec: which network kinds each
// role joins. Nothing else may be joined; Verify checks live containers
// against it.
var RoleNetworks = map[string][]string{
	topospec.RoleCore:     {topospec.LLMNet},
	topospec.RoleFetch:    {topospec.LLMNet, topospec.FetchNet},
	topospec.RoleToolExec: {topospec.LLMNet},
	topospec.RoleProxy:    {topospec.FetchNet, topospec.EgressNet},
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// ProxyURL is the proxy URL FETCH members use: its pinned fetchnet address.
func ProxyURL(s topospec.Spec) string { return s.ProxyURL(s.Docker.ProxyIP) }

// Owner is the comment on every firewall rule and the label value on every
// Docker object of this topology.
func Owner(s topospec.Spec) string { return "threegate:" + s.Name }

// NetworkName is the Docker name of the network of the given kind.
func NetworkName(name, kind string) string { return name + "-" + kind }

// DefaultSubnets derives three consecutive /24s for a topology name inside
// 10.200.0.0/13-ish space (10.200–10.239), away from Docker's default pools
// (172.17–31/16, 192.168/16). Different names mostly land on different
// blocks; a clash with an existing network is caught at plan time.
func DefaultSubnets(name string) map[string]netip.Prefix {
	h := sha256.Sum256([]byte(name))
	v := binary.BigEndian.Uint32(h[:4])
	second := 200 + int(v%40)
	third := int((v/40)%85) * 3
	out := map[string]netip.Prefix{}
	for i, k := range topospec.Kinds {
		out[k] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(second), byte(third + i), 0}), 24)
	}
	return out
}

// Build validates an Input and returns the Spec with every default
// filled: the neutral proxy settings by topospec.BuildProxy, then the
// networks, the pinned addresses, allow_private and the firewall (nil:
// enabled, without logging).
func Build(in topospec.Input) (topospec.Spec, fault.List) {
	var ps fault.List
	d := in.Docker
	s := topospec.Spec{Name: in.Name, Docker: topospec.Docker{Firewall: topospec.Firewall{Enabled: true}}}
	if d.Firewall != nil {
		s.Docker.Firewall = *d.Firewall
	}
	switch {
	case in.Name == "":
		ps.Add("name", -1, "Invalid Topology Name", "name must not be empty")
	case in.Name == sandbox.ManagedBridge:
		ps.Add("name", -1, "Invalid Topology Name",
			"%q is the managed bridge network's name (network = \"bridge\"), and its guard's; choose another.", in.Name)
	case len(in.Name) > topospec.MaxNameLen || !nameRE.MatchString(in.Name):
		ps.Add("name", -1, "Invalid Topology Name",
			"%q: use 1 to %d characters of lower-case letters, digits and '-', starting with a letter or digit "+
				"(it prefixes the Docker network names and the iptables chains TG-<name> and TGI-<name>).", in.Name, topospec.MaxNameLen)
	}

	defaults := DefaultSubnets(in.Name)
	for _, k := range topospec.Kinds {
		field := k + "_subnet"
		n := topospec.Network{Kind: k, Name: NetworkName(in.Name, k), Internal: k != topospec.EgressNet}
		raw := d.Subnets[k]
		if raw == "" {
			n.Subnet = defaults[k]
		} else {
			p, err := netip.ParsePrefix(raw)
			switch {
			case err != nil:
				ps.Add(field, -1, "Invalid Subnet", "%q is not an IPv4 CIDR such as 10.213.1.0/24: %v", raw, err)
				continue
			case !p.Addr().Is4():
				ps.Add(field, -1, "Invalid Subnet", "%q: only IPv4 subnets are supported (no ip6tables rules are managed).", raw)
				continue
			case p.Masked() != p:
				ps.Add(field, -1, "Invalid Subnet", "%q has host bits set; write it as %s.", raw, p.Masked())
				continue
			case p.Bits() > 28 || p.Bits() < 8:
				ps.Add(field, -1, "Invalid Subnet", "%q: use a prefix length between /8 and /28 so that pinned and dynamic addresses both fit.", raw)
				continue
			}
			n.Subnet = p
		}
		n.IPRange = upperHalf(n.Subnet)
		n.Gateway = n.Subnet.Addr().Next()
		if g := d.Gateways[k]; g != "" {
			a, err := netip.ParseAddr(g)
			switch {
			case err != nil:
				ps.Add(k+"_gateway", -1, "Invalid Gateway", "%q is not an IPv4 address: %v", g, err)
			case !inLowerHalf(n.Subnet, a):
				ps.Add(k+"_gateway", -1, "Gateway Outside Subnet",
					"%s must be a host address in the lower half of %s (the upper half %s is Docker's dynamic range).", a, n.Subnet, n.IPRange)
			case k == topospec.LLMNet && a == dnsSink(n):
				ps.Add(k+"_gateway", -1, "Gateway Is The DNS Sink",
					"%s is the last address below Docker's dynamic range, which the topology keeps unassigned as its members' DNS upstream; pick another.", a)
			default:
				n.Gateway = a
			}
		}
		s.Docker.Networks = append(s.Docker.Networks, n)
	}
	nets := s.Docker.Networks
	for i := range nets {
		for j := i + 1; j < len(nets); j++ {
			a, b := nets[i], nets[j]
			if overlap(a, b) {
				ps.Add(b.Kind+"_subnet", -1, "Overlapping Subnets",
					"%s subnet %s overlaps %s subnet %s; each ThreeGate network needs its own address range.", b.Kind, b.Subnet, a.Kind, a.Subnet)
			}
		}
	}

	s.Proxy = topospec.BuildProxy(in.Proxy, &ps)
	for i, raw := range d.AllowPrivate {
		prs, err := proxy.ParsePrefixes([]string{raw})
		if err != nil {
			ps.Add("proxy.allow_private", i, "Invalid CIDR", "%v", err)
			continue
		}
		s.Docker.AllowPrivate = append(s.Docker.AllowPrivate, prs...)
	}
	s.Docker.ProxyIP = pinned(&ps, "ip", d.ProxyIP, s.Network(topospec.FetchNet))
	s.Docker.EgressIP = pinned(&ps, "egress_ip", d.EgressIP, s.Network(topospec.EgressNet))
	return s, ps
}

// pinned parses a pinned address, or picks the one after the gateway. Pinned
// addresses must sit in the lower half of the subnet, below Docker's dynamic
// range, so no other container can be handed them first.
func pinned(ps *fault.List, sub, raw string, n topospec.Network) netip.Addr {
	if !n.Subnet.IsValid() {
		return netip.Addr{}
	}
	if raw == "" {
		a := n.Gateway.Next()
		if !inLowerHalf(n.Subnet, a) {
			a = n.Subnet.Addr().Next()
		}
		return a
	}
	a, err := netip.ParseAddr(raw)
	switch {
	case err != nil:
		ps.Add("proxy."+sub, -1, "Invalid Proxy Address", "%q is not an IPv4 address: %v", raw, err)
	case !n.Subnet.Contains(a):
		ps.Add("proxy."+sub, -1, "Proxy Address Outside Subnet", "%s is not inside the %s subnet %s.", a, n.Kind, n.Subnet)
	case !inLowerHalf(n.Subnet, a):
		ps.Add("proxy."+sub, -1, "Proxy Address Outside Subnet",
			"%s lies in the upper half of %s (%s), which Docker hands out dynamically; pin an address in the lower half.", a, n.Subnet, upperHalf(n.Subnet))
	case a == n.Gateway:
		ps.Add("proxy."+sub, -1, "Proxy Address Is The Gateway", "%s is the %s gateway; pick another address.", a, n.Kind)
	default:
		return a
	}
	return netip.Addr{}
}

func upperHalf(p netip.Prefix) netip.Prefix {
	a := p.Addr().As4()
	v := binary.BigEndian.Uint32(a[:]) | 1<<(31-p.Bits())
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.PrefixFrom(netip.AddrFrom4(b), p.Bits()+1)
}

// inLowerHalf reports whether a is a host address (not the network address)
// of the lower half of p.
func inLowerHalf(p netip.Prefix, a netip.Addr) bool {
	return p.Contains(a) && !upperHalf(p).Contains(a) && a != p.Addr()
}

// DNSSink is the address every member's engine resolver gets as its only
// upstream: the last address of llmnet's lower half, just below Docker's
// dynamic range. The topology never assigns it (the proxy sits on fetchnet
// and egressnet, the gateway may not take it, Docker hands out only the
// upper half), so nothing answers there.
//
// Docker's embedded resolver (127.0.0.11) answers the names of containers
// on the member's networks itself and forwards every other name to the
// container's upstream. Docker 20.10 sends that forward from the member's
// namespace, which on an internal network still has a default route to
// the gateway: with the host's resolvers as upstream, the query left the
// member for the host's resolver and only iptables stopped it (and on
// engines affected by CVE-2024-29018 a loopback upstream is asked from the
// host's namespace, where no rule stops it). The sink is on llmnet, which
// every member joins, and on the host's llmnet bridge: from either
// namespace the forward stays on that bridge, finds no one and is dropped,
// whatever the engine version and whatever the host's resolv.conf says.
func DNSSink(s topospec.Spec) netip.Addr { return dnsSink(s.Network(topospec.LLMNet)) }

func dnsSink(n topospec.Network) netip.Addr {
	if !n.IPRange.IsValid() {
		return netip.Addr{}
	}
	return n.IPRange.Addr().Prev()
}

// Roles returns the CORE, FETCH and TOOL_EXEC roles of the topology.
func Roles(s topospec.Spec) map[string]topospec.Role {
	names := func(kinds []string) []string {
		var out []string
		for _, k := range kinds {
			out = append(out, NetworkName(s.Name, k))
		}
		return out
	}
	url := ProxyURL(s)
	dns := []netip.Addr{DNSSink(s)}
	noProxy := strings.Join([]string{"localhost", "127.0.0.1", s.Network(topospec.LLMNet).Subnet.String()}, ",")
	return map[string]topospec.Role{
		topospec.RoleCore: {Networks: names(RoleNetworks[topospec.RoleCore]), Env: map[string]string{}, DNS: dns},
		topospec.RoleFetch: {Networks: names(RoleNetworks[topospec.RoleFetch]), Env: map[string]string{
			"http_proxy": url, "https_proxy": url, "HTTP_PROXY": url, "HTTPS_PROXY": url,
			"no_proxy": noProxy, "NO_PROXY": noProxy,
		}, DNS: dns},
		topospec.RoleToolExec: {Networks: names(RoleNetworks[topospec.RoleToolExec]), Env: map[string]string{}, SandboxNetwork: "none", DNS: dns},
	}
}

// Widening lists, in words, what a change from old to new opens up. An empty
// list means the change does not widen connectivity.
func Widening(old, new topospec.Spec) []string {
	var out []string
	had := map[string]bool{}
	for _, e := range old.Proxy.Allow {
		had[e.String()] = true
	}
	for _, e := range new.Proxy.Allow {
		if !had[e.String()] {
			out = append(out, fmt.Sprintf("the proxy will allow connections to %s", e))
		}
	}
	hadP := map[netip.Prefix]bool{}
	for _, p := range old.Docker.AllowPrivate {
		hadP[p] = true
	}
	for _, p := range new.Docker.AllowPrivate {
		if !hadP[p] {
			out = append(out, fmt.Sprintf("the proxy will reach the private range %s", p))
		}
	}
	hadD := map[netip.Addr]bool{}
	for _, d := range old.Proxy.DNS {
		hadD[d] = true
	}
	if len(old.Proxy.DNS) > 0 && len(new.Proxy.DNS) == 0 {
		out = append(out, "the proxy's egress to DNS (port 53) will be allowed to any address instead of only the listed servers")
	}
	for _, d := range new.Proxy.DNS {
		if len(old.Proxy.DNS) > 0 && !hadD[d] {
			out = append(out, fmt.Sprintf("the proxy's egress to DNS will be allowed to %s", d))
		}
	}
	if old.Docker.Firewall.Enabled && !new.Docker.Firewall.Enabled {
		out = append(out, "the host firewall will be removed: ThreeGate members lose the host-level deny (forwarded traffic and the path to host services)")
	}
	for _, k := range topospec.Kinds {
		o, n := old.Network(k), new.Network(k)
		if o.Subnet.IsValid() && n.Subnet.IsValid() && n.Subnet.Bits() < o.Subnet.Bits() {
			out = append(out, fmt.Sprintf("%s grows from %s to %s", k, o.Subnet, n.Subnet))
		}
	}
	sort.Strings(out)
	return out
}

// Compare plans the move from old to new. drifted says the live topology
// was found to differ from old; then apply replaces what differs, so no
// object can be promised to stay.
func Compare(old, new topospec.Spec, drifted bool) topospec.Change {
	c := topospec.Change{KeepNetworks: !drifted, Opens: Widening(old, new)}
	for _, k := range topospec.Kinds {
		a, b := old.Network(k), new.Network(k)
		c.KeepNetworks = c.KeepNetworks && a.Subnet == b.Subnet && a.Gateway == b.Gateway
	}
	c.KeepProxy = c.KeepNetworks && ProxyConfigHash(old) == ProxyConfigHash(new)
	return c
}

// FirewallParams are the facts of the topology the host firewall needs.
func FirewallParams(s topospec.Spec) firewall.Params {
	return firewall.Params{
		Name:      s.Name,
		LLMNet:    s.Network(topospec.LLMNet).Subnet,
		FetchNet:  s.Network(topospec.FetchNet).Subnet,
		EgressNet: s.Network(topospec.EgressNet).Subnet,
		ProxyIP:   s.Docker.EgressIP,
		DNS:       s.Proxy.DNS,
		LogDenied: s.Docker.Firewall.LogDenied,
	}
}

// Rules is the topology's firewall rule set.
func Rules(s topospec.Spec) firewall.Set { return firewall.Build(FirewallParams(s)) }

func overlap(a, b topospec.Network) bool {
	return a.Subnet.IsValid() && b.Subnet.IsValid() && a.Subnet.Overlaps(b.Subnet)
}

// Overlaps reports the subnets of s that overlap a subnet of other, a
// topology planned in the same run on the same daemon: apply would create
// one and fail on the other, so the plan refuses the pair.
func Overlaps(s, other topospec.Spec) fault.List {
	var ps fault.List
	for _, a := range s.Docker.Networks {
		for _, b := range other.Docker.Networks {
			if overlap(a, b) {
				ps.Add(a.Kind+"_subnet", -1, "Subnet Overlaps Another Topology",
					"%s subnet %s overlaps the %s subnet %s of threegate_network %q in this configuration; each topology needs its own address ranges.",
					a.Kind, a.Subnet, b.Kind, b.Subnet, other.Name)
			}
		}
	}
	return ps
}
