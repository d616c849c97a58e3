// Package topology is ThreeGate: the plan (the three networks and their
// subnets, the pinned addresses of the egress proxy, the roles and which
// networks each may join, and the validation of all of it, as Problems with
// attribute paths) and the Service that brings a planned topology up on
// Docker and the host firewall, reads it back, verifies it, imports it and
// tears it down. This file is the plan: pure data, no Docker or iptables.
package topology

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// Network kinds, in the order they are created.
const (
	LLMNet    = "llmnet"
	FetchNet  = "fetchnet"
	EgressNet = "egressnet"
)

// Kinds lists the network kinds of a topology.
var Kinds = []string{LLMNet, FetchNet, EgressNet}

// Roles, as the `roles` output names them.
const (
	RoleCore     = "CORE"
	RoleFetch    = "FETCH"
	RoleToolExec = "TOOL_EXEC"
	RoleProxy    = "PROXY"
)

// RoleNetworks is the membership rule of the spec: which network kinds each
// role joins. Nothing else may be joined; Verify checks live containers
// against it.
var RoleNetworks = map[string][]string{
	RoleCore:     {LLMNet},
	RoleFetch:    {LLMNet, FetchNet},
	RoleToolExec: {LLMNet},
	RoleProxy:    {FetchNet, EgressNet},
}

// DefaultProxyPort is the port the proxy listens on when none is set.
const DefaultProxyPort = 3128

// MaxNameLen keeps every derived name within the kernel's limits: the input
// chain "TGI-<name>" must fit iptables' 28 characters.
const MaxNameLen = 24

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// Input is what a user writes. Empty strings mean "default".
type Input struct {
	Name     string
	Subnets  map[string]string // kind -> CIDR
	Gateways map[string]string // kind -> address
	Proxy    ProxyInput
	Firewall Firewall
}

// ProxyInput is the user's proxy block.
type ProxyInput struct {
	Image        string
	Allow        []string
	AllowPrivate []string // CIDRs the proxy may reach although private
	IP           string   // on fetchnet
	EgressIP     string   // on egressnet
	Port         int      // 0: DefaultProxyPort
	DNS          []string
}

// Firewall says whether the host firewall is enforced and whether denied
// packets are logged.
type Firewall struct {
	Enabled   bool
	LogDenied bool
}

// Network is one planned Docker network.
type Network struct {
	Kind     string
	Name     string
	Subnet   netip.Prefix
	Gateway  netip.Addr
	IPRange  netip.Prefix // where Docker may hand out addresses; pinned ones sit below it
	Internal bool
}

// Proxy is the planned proxy container.
type Proxy struct {
	Name         string
	Image        string
	Allow        []AllowEntry
	AllowPrivate []netip.Prefix
	IP           netip.Addr
	EgressIP     netip.Addr
	Port         int
	DNS          []netip.Addr
}

// AllowEntry is one normalised allowlist pattern.
type AllowEntry struct {
	Host string // lower case, no trailing dot; may start with "*."
	Port int
}

func (a AllowEntry) String() string { return a.Host + ":" + strconv.Itoa(a.Port) }

// URL is the proxy URL FETCH members use.
func (p Proxy) URL() string {
	return "http://" + netip.AddrPortFrom(p.IP, uint16(p.Port)).String()
}

// Spec is a complete, validated topology.
type Spec struct {
	Name     string
	Networks []Network // in Kinds order
	Proxy    Proxy
	Firewall Firewall
}

// Network returns the network of the given kind.
func (s Spec) Network(kind string) Network {
	for _, n := range s.Networks {
		if n.Kind == kind {
			return n
		}
	}
	return Network{}
}

// Owner is the comment on every firewall rule and the label value on every
// Docker object of this topology.
func (s Spec) Owner() string { return "threegate:" + s.Name }

// NetworkName is the Docker name of the network of the given kind.
func NetworkName(name, kind string) string { return name + "-" + kind }

// ProxyName is the Docker name of the proxy container.
func ProxyName(name string) string { return name + "-proxy" }

// Problem is one validation failure, located at an attribute: Field is a
// top-level attribute ("name", "llmnet_subnet", "proxy"), Sub an attribute
// inside it ("allow"), Index a list index or -1.
type Problem struct {
	Field   string
	Sub     string
	Index   int
	Summary string
	Detail  string
}

func (p Problem) Error() string {
	at := p.Field
	if p.Sub != "" {
		at += "." + p.Sub
	}
	if p.Index >= 0 {
		at += fmt.Sprintf("[%d]", p.Index)
	}
	return fmt.Sprintf("%s: %s: %s", at, p.Summary, p.Detail)
}

// Problems is a list of validation failures.
type Problems []Problem

func (ps *Problems) add(field, sub string, index int, summary, format string, args ...any) {
	*ps = append(*ps, Problem{Field: field, Sub: sub, Index: index, Summary: summary, Detail: fmt.Sprintf(format, args...)})
}

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
	for i, k := range Kinds {
		out[k] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(second), byte(third + i), 0}), 24)
	}
	return out
}

// Build validates an Input and returns the Spec with every default filled.
func Build(in Input) (Spec, Problems) {
	var ps Problems
	s := Spec{Name: in.Name, Firewall: in.Firewall}
	switch {
	case in.Name == "":
		ps.add("name", "", -1, "Invalid Topology Name", "name must not be empty")
	case in.Name == sandbox.ManagedBridge:
		ps.add("name", "", -1, "Invalid Topology Name",
			"%q is the managed bridge network's name (network = \"bridge\"), and its guard's; choose another.", in.Name)
	case len(in.Name) > MaxNameLen || !nameRE.MatchString(in.Name):
		ps.add("name", "", -1, "Invalid Topology Name",
			"%q: use 1 to %d characters of lower-case letters, digits and '-', starting with a letter or digit "+
				"(it prefixes the Docker network names and the iptables chains TG-<name> and TGI-<name>).", in.Name, MaxNameLen)
	}

	defaults := DefaultSubnets(in.Name)
	for _, k := range Kinds {
		field := k + "_subnet"
		n := Network{Kind: k, Name: NetworkName(in.Name, k), Internal: k != EgressNet}
		raw := in.Subnets[k]
		if raw == "" {
			n.Subnet = defaults[k]
		} else {
			p, err := netip.ParsePrefix(raw)
			switch {
			case err != nil:
				ps.add(field, "", -1, "Invalid Subnet", "%q is not an IPv4 CIDR such as 10.213.1.0/24: %v", raw, err)
				continue
			case !p.Addr().Is4():
				ps.add(field, "", -1, "Invalid Subnet", "%q: only IPv4 subnets are supported (no ip6tables rules are managed).", raw)
				continue
			case p.Masked() != p:
				ps.add(field, "", -1, "Invalid Subnet", "%q has host bits set; write it as %s.", raw, p.Masked())
				continue
			case p.Bits() > 28 || p.Bits() < 8:
				ps.add(field, "", -1, "Invalid Subnet", "%q: use a prefix length between /8 and /28 so that pinned and dynamic addresses both fit.", raw)
				continue
			}
			n.Subnet = p
		}
		n.IPRange = upperHalf(n.Subnet)
		n.Gateway = n.Subnet.Addr().Next()
		if g := in.Gateways[k]; g != "" {
			a, err := netip.ParseAddr(g)
			switch {
			case err != nil:
				ps.add(k+"_gateway", "", -1, "Invalid Gateway", "%q is not an IPv4 address: %v", g, err)
			case !inLowerHalf(n.Subnet, a):
				ps.add(k+"_gateway", "", -1, "Gateway Outside Subnet",
					"%s must be a host address in the lower half of %s (the upper half %s is Docker's dynamic range).", a, n.Subnet, n.IPRange)
			case k == LLMNet && a == n.dnsSink():
				ps.add(k+"_gateway", "", -1, "Gateway Is The DNS Sink",
					"%s is the last address below Docker's dynamic range, which the topology keeps unassigned as its members' DNS upstream; pick another.", a)
			default:
				n.Gateway = a
			}
		}
		s.Networks = append(s.Networks, n)
	}
	for i := range s.Networks {
		for j := i + 1; j < len(s.Networks); j++ {
			a, b := s.Networks[i], s.Networks[j]
			if a.Subnet.Overlaps(b.Subnet) {
				ps.add(b.Kind+"_subnet", "", -1, "Overlapping Subnets",
					"%s subnet %s overlaps %s subnet %s; each ThreeGate network needs its own address range.", b.Kind, b.Subnet, a.Kind, a.Subnet)
			}
		}
	}

	s.Proxy = buildProxy(in, s, &ps)
	return s, ps
}

func buildProxy(in Input, s Spec, ps *Problems) Proxy {
	pi := in.Proxy
	p := Proxy{Name: ProxyName(in.Name), Image: pi.Image, Port: pi.Port}
	if pi.Image == "" {
		ps.add("proxy", "image", -1, "Missing Proxy Image", "proxy.image must name an isolation image that contains agent-runner.")
	}
	if p.Port == 0 {
		p.Port = DefaultProxyPort
	}
	if p.Port < 1 || p.Port > 65535 {
		ps.add("proxy", "port", -1, "Invalid Proxy Port", "%d is not a TCP port; use 1 to 65535.", pi.Port)
	}
	for i, raw := range pi.Allow {
		e, err := ParseAllow(raw)
		if err != nil {
			ps.add("proxy", "allow", i, "Invalid Allow Pattern", "%v", err)
			continue
		}
		p.Allow = append(p.Allow, e)
	}
	for i, raw := range pi.AllowPrivate {
		prs, err := proxy.ParsePrefixes([]string{raw})
		if err != nil {
			ps.add("proxy", "allow_private", i, "Invalid CIDR", "%v", err)
			continue
		}
		p.AllowPrivate = append(p.AllowPrivate, prs...)
	}
	for i, raw := range pi.DNS {
		a, err := netip.ParseAddr(raw)
		if err != nil || !a.Is4() {
			ps.add("proxy", "dns", i, "Invalid DNS Server", "%q is not an IPv4 address.", raw)
			continue
		}
		p.DNS = append(p.DNS, a)
	}
	p.IP = pinned(ps, "ip", pi.IP, s.Network(FetchNet))
	p.EgressIP = pinned(ps, "egress_ip", pi.EgressIP, s.Network(EgressNet))
	return p
}

// pinned parses a pinned address, or picks the one after the gateway. Pinned
// addresses must sit in the lower half of the subnet, below Docker's dynamic
// range, so no other container can be handed them first.
func pinned(ps *Problems, sub, raw string, n Network) netip.Addr {
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
		ps.add("proxy", sub, -1, "Invalid Proxy Address", "%q is not an IPv4 address: %v", raw, err)
	case !n.Subnet.Contains(a):
		ps.add("proxy", sub, -1, "Proxy Address Outside Subnet", "%s is not inside the %s subnet %s.", a, n.Kind, n.Subnet)
	case !inLowerHalf(n.Subnet, a):
		ps.add("proxy", sub, -1, "Proxy Address Outside Subnet",
			"%s lies in the upper half of %s (%s), which Docker hands out dynamically; pin an address in the lower half.", a, n.Subnet, upperHalf(n.Subnet))
	case a == n.Gateway:
		ps.add("proxy", sub, -1, "Proxy Address Is The Gateway", "%s is the %s gateway; pick another address.", a, n.Kind)
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

// ParseAllow normalises one allowlist pattern with the proxy's own parser
// (proxy.ParsePattern), so plan-time validation and the running proxy can
// never disagree: "host", "host:port", "*.domain[:port]", an IPv4 literal or
// a bracketed IPv6 literal; a bare host means port 443. Schemes, paths, user
// info and ports outside 1–65535 are errors.
func ParseAllow(raw string) (AllowEntry, error) {
	p, err := proxy.ParsePattern(raw)
	if err != nil {
		return AllowEntry{}, err
	}
	c := p.String()
	i := strings.LastIndex(c, ":")
	port, _ := strconv.Atoi(c[i+1:])
	return AllowEntry{Host: c[:i], Port: port}, nil
}

// Role is what a member of a role joins and what it sets in its environment.
type Role struct {
	Networks       []string          // Docker network names
	Env            map[string]string // environment for the role's container
	SandboxNetwork string            // network of the execution sandbox; "" = the role's networks
	// DNS is the upstream a member's engine resolver forwards to (Docker's
	// HostConfig.DNS): the topology's DNS sink. See Spec.DNSSink.
	DNS []string
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
func (s Spec) DNSSink() netip.Addr { return s.Network(LLMNet).dnsSink() }

func (n Network) dnsSink() netip.Addr {
	if !n.IPRange.IsValid() {
		return netip.Addr{}
	}
	return n.IPRange.Addr().Prev()
}

// Roles returns the CORE, FETCH and TOOL_EXEC roles of the topology.
func (s Spec) Roles() map[string]Role {
	names := func(kinds []string) []string {
		var out []string
		for _, k := range kinds {
			out = append(out, NetworkName(s.Name, k))
		}
		return out
	}
	url := s.Proxy.URL()
	dns := []string{s.DNSSink().String()}
	noProxy := strings.Join([]string{"localhost", "127.0.0.1", s.Network(LLMNet).Subnet.String()}, ",")
	return map[string]Role{
		RoleCore: {Networks: names(RoleNetworks[RoleCore]), Env: map[string]string{}, DNS: dns},
		RoleFetch: {Networks: names(RoleNetworks[RoleFetch]), Env: map[string]string{
			"http_proxy": url, "https_proxy": url, "HTTP_PROXY": url, "HTTPS_PROXY": url,
			"no_proxy": noProxy, "NO_PROXY": noProxy,
		}, DNS: dns},
		RoleToolExec: {Networks: names(RoleNetworks[RoleToolExec]), Env: map[string]string{}, SandboxNetwork: "none", DNS: dns},
	}
}

// Widening lists, in words, what a change from old to new opens up. An empty
// list means the change does not widen connectivity.
func Widening(old, new Spec) []string {
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
	for _, p := range old.Proxy.AllowPrivate {
		hadP[p] = true
	}
	for _, p := range new.Proxy.AllowPrivate {
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
	if old.Firewall.Enabled && !new.Firewall.Enabled {
		out = append(out, "the host firewall will be removed: ThreeGate members lose the host-level deny (forwarded traffic and the path to host services)")
	}
	for _, k := range Kinds {
		o, n := old.Network(k), new.Network(k)
		if o.Subnet.IsValid() && n.Subnet.IsValid() && n.Subnet.Bits() < o.Subnet.Bits() {
			out = append(out, fmt.Sprintf("%s grows from %s to %s", k, o.Subnet, n.Subnet))
		}
	}
	sort.Strings(out)
	return out
}

// Change is what moving a live topology from one spec to another does to
// its objects.
type Change struct {
	KeepNetworks bool     // every network stays as it is
	KeepProxy    bool     // and so does the proxy container
	Opens        []string // what the change widens (Widening)
}

// Compare plans the move from old to new. drifted says the live topology
// was found to differ from old; then apply replaces what differs, so no
// object can be promised to stay.
func Compare(old, new Spec, drifted bool) Change {
	c := Change{KeepNetworks: !drifted, Opens: Widening(old, new)}
	for _, k := range Kinds {
		a, b := old.Network(k), new.Network(k)
		c.KeepNetworks = c.KeepNetworks && a.Subnet == b.Subnet && a.Gateway == b.Gateway
	}
	c.KeepProxy = c.KeepNetworks && ProxyConfigHash(old) == ProxyConfigHash(new)
	return c
}

// FirewallParams are the facts of the topology the host firewall needs.
func (s Spec) FirewallParams() firewall.Params {
	return firewall.Params{
		Name:      s.Name,
		LLMNet:    s.Network(LLMNet).Subnet,
		FetchNet:  s.Network(FetchNet).Subnet,
		EgressNet: s.Network(EgressNet).Subnet,
		ProxyIP:   s.Proxy.EgressIP,
		DNS:       s.Proxy.DNS,
		LogDenied: s.Firewall.LogDenied,
	}
}

// Rules is the topology's firewall rule set.
func (s Spec) Rules() firewall.Set { return firewall.Build(s.FirewallParams()) }
