// Package firewall is the ThreeGate host firewall: the rule set of a topology
// as data, and applying, reading, diffing and removing it on the real
// iptables. The rules live in two chains the topology owns: TG-<name>,
// reached by one jump from DOCKER-USER (forwarded traffic), and
// TGI-<name>, reached by one jump from INPUT (traffic to the host itself,
// e.g. a host service through the bridge gateway). Every rule carries the
// comment "threegate:<name>"; rules without it are never touched.
package firewall

import (
	"fmt"
	"net/netip"
	"strings"
)

// Parent chains that Docker or the kernel own and that we jump from.
const (
	DockerUser = "DOCKER-USER"
	Input      = "INPUT"
)

// Params are the facts of a topology the rules depend on.
type Params struct {
	Name      string       // topology name
	LLMNet    netip.Prefix // internal
	FetchNet  netip.Prefix // internal
	EgressNet netip.Prefix // not internal; only the proxy
	ProxyIP   netip.Addr   // the proxy's address on egressnet
	DNS       []netip.Addr // DNS servers the proxy may ask; empty = any on port 53
	LogDenied bool         // add LOG rules before the drops
}

// Rule is one rule in an owned chain, as iptables -S prints it after
// "-A <chain> ".
type Rule struct {
	Chain string
	Spec  string
}

// Line is the rule as iptables -S and iptables-restore write it.
func (r Rule) Line() string { return "-A " + r.Chain + " " + r.Spec }

// Jump is the single rule in a parent chain that sends packets to an owned
// chain. It must come before any rule of the parent that ends it for every
// packet (Docker ends DOCKER-USER with an unconditional RETURN).
type Jump struct {
	Parent  string
	Target  string
	comment string
}

// Spec is the jump's rule spec, as iptables -S prints it.
func (j Jump) Spec() string { return fmt.Sprintf("-m comment --comment %q -j %s", j.comment, j.Target) }

// Line is the jump as iptables -S prints it.
func (j Jump) Line() string { return "-A " + j.Parent + " " + j.Spec() }

// Set is the complete wanted state of one topology.
type Set struct {
	Owner  string   // the comment on every rule
	Chains []string // owned chains, in order
	Rules  []Rule   // rules of the owned chains, chain by chain, in order
	Jumps  []Jump
}

// Comment is the owner comment for a topology name.
func Comment(name string) string { return "threegate:" + name }

// ForwardChain and InputChain name the owned chains of a topology.
func ForwardChain(name string) string { return "TG-" + name }

// InputChain names the chain for traffic addressed to the host.
func InputChain(name string) string { return "TGI-" + name }

// Build returns the rule set of a topology. The chains only ever take
// away: what they let through they RETURN, never ACCEPT, so Docker's own
// chains (the isolation of internal networks, inter-container
// communication settings) and the host's INPUT rules still judge it, and
// a mistake here can narrow connectivity but never open more than Docker
// alone would. The order is the security argument, so it is spelled out:
//
// TG-<name> (from DOCKER-USER, forwarded traffic):
//  1. replies (ESTABLISHED,RELATED) to and from the ThreeGate subnets;
//  2. traffic inside one ThreeGate network (bridge-netfilter sends it here);
//  3. DROP of everything else into the three subnets: new connections
//     from outside, and (before 4, on purpose) from the proxy's egress
//     address into llmnet or fetchnet by routing;
//  4. the proxy's egress address: new tcp/443 and DNS (udp, tcp 53);
//  5. [LOG] and DROP of everything else from the three subnets.
//
// TGI-<name> (from INPUT, traffic to the host itself, e.g. a service on
// the bridge gateway): replies to host-initiated connections, then [LOG]
// and DROP of everything from the three subnets.
func Build(p Params) Set {
	c := Comment(p.Name)
	fwd, in := ForwardChain(p.Name), InputChain(p.Name)
	subnets := []netip.Prefix{p.LLMNet, p.FetchNet, p.EgressNet}
	s := Set{Owner: c, Chains: []string{fwd, in}}
	add := func(chain, format string, args ...any) {
		spec := fmt.Sprintf(format, args...)
		// iptables -S prints the comment match after the other matches and
		// before the target; keep that order so live and wanted compare as text.
		i := strings.Index(spec, " -j ")
		spec = spec[:i] + fmt.Sprintf(" -m comment --comment %q", c) + spec[i:]
		s.Rules = append(s.Rules, Rule{Chain: chain, Spec: strings.TrimSpace(spec)})
	}
	const est = "-m conntrack --ctstate RELATED,ESTABLISHED"
	for _, n := range subnets {
		add(fwd, "-d %s %s -j RETURN", n, est)
	}
	for _, n := range subnets {
		add(fwd, "-s %s %s -j RETURN", n, est)
	}
	for _, n := range subnets {
		add(fwd, "-s %s -d %s -j RETURN", n, n)
	}
	for _, n := range subnets {
		add(fwd, "-d %s -j DROP", n)
	}
	proxy := netip.PrefixFrom(p.ProxyIP, 32)
	add(fwd, "-s %s -p tcp -m tcp --dport 443 -m conntrack --ctstate NEW -j RETURN", proxy)
	if len(p.DNS) == 0 {
		add(fwd, "-s %s -p udp -m udp --dport 53 -j RETURN", proxy)
		add(fwd, "-s %s -p tcp -m tcp --dport 53 -m conntrack --ctstate NEW -j RETURN", proxy)
	}
	for _, d := range p.DNS {
		add(fwd, "-s %s -d %s -p udp -m udp --dport 53 -j RETURN", proxy, netip.PrefixFrom(d, 32))
		add(fwd, "-s %s -d %s -p tcp -m tcp --dport 53 -m conntrack --ctstate NEW -j RETURN", proxy, netip.PrefixFrom(d, 32))
	}
	for _, n := range subnets {
		if p.LogDenied {
			add(fwd, "-s %s -j LOG --log-prefix %q", n, logPrefix(p.Name, "fwd"))
		}
		add(fwd, "-s %s -j DROP", n)
	}

	for _, n := range subnets {
		add(in, "-s %s %s -j RETURN", n, est)
	}
	for _, n := range subnets {
		if p.LogDenied {
			add(in, "-s %s -j LOG --log-prefix %q", n, logPrefix(p.Name, "host"))
		}
		add(in, "-s %s -j DROP", n)
	}
	s.Jumps = []Jump{
		{Parent: DockerUser, Target: fwd, comment: c},
		{Parent: Input, Target: in, comment: c},
	}
	return s
}

// logPrefix fits the kernel's 29-character LOG prefix limit.
func logPrefix(name, path string) string {
	p := "tg:" + name
	if len(p) > 22 {
		p = p[:22]
	}
	return p + " " + path + " "
}

// Lines returns the rule set as iptables -S lines: chain declarations, the
// rules of the owned chains, then the jumps.
func (s Set) Lines() []string {
	var out []string
	for _, c := range s.Chains {
		out = append(out, "-N "+c)
	}
	for _, r := range s.Rules {
		out = append(out, r.Line())
	}
	for _, j := range s.Jumps {
		out = append(out, j.Line())
	}
	return out
}

// RestoreText is the rule set as input for `iptables-restore --noflush`, for an
// operator to load at boot after Docker has started (DOCKER-USER must
// exist). Loading it declares (and so flushes and refills) only the owned
// chains; the jumps are inserted at the top of their parents, so run it once
// per boot, when no jump exists yet.
func (s Set) RestoreText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# ThreeGate firewall for %q, generated by terraform-provider-meepa.\n", s.Owner)
	b.WriteString("# Load after docker.service has started: iptables-restore --noflush < this-file\n")
	s.writeChains(&b)
	for _, j := range s.Jumps {
		fmt.Fprintf(&b, "-I %s 1 %s\n", j.Parent, j.Spec())
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// writeChains opens an iptables-restore filter table and declares (which,
// with --noflush, creates or empties) and refills the owned chains.
func (s Set) writeChains(b *strings.Builder) {
	b.WriteString("*filter\n")
	for _, c := range s.Chains {
		fmt.Fprintf(b, ":%s - [0:0]\n", c)
	}
	for _, r := range s.Rules {
		b.WriteString(r.Line() + "\n")
	}
}

// Args splits the rule spec into iptables arguments, honouring the double
// quotes around comments and log prefixes (which never contain quotes).
func (r Rule) Args() []string { return splitQuoted(r.Spec) }

// Args splits the jump spec into iptables arguments.
func (j Jump) Args() []string { return splitQuoted(j.Spec()) }

func splitQuoted(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, has := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, has = !quoted, true
		case r == ' ' && !quoted:
			if has {
				out = append(out, cur.String())
				cur.Reset()
				has = false
			}
		default:
			cur.WriteRune(r)
			has = true
		}
	}
	if has {
		out = append(out, cur.String())
	}
	return out
}
