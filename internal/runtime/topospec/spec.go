// Package topospec is the contract of a ThreeGate topology, whatever runs
// it: the Input a user writes, the one Spec both backends plan into (a
// neutral core: name, proxy image, allow list, DNS, port; and a Docker part:
// networks, pinned addresses, allow_private, host firewall), the field errors
// (fault.List) that locate a bad input at its attribute, the Backend interface that
// package topology (Docker Engine and iptables) and package kubetopology (a
// cluster's NetworkPolicies and a proxy Deployment) implement, what they
// report (Status, Report), the record a backend keeps of the spec it
// applied, and the proxy's command line derived from a spec.
//
// It is a package of its own, rather than part of topology, so that the
// cluster backend imports the contract and none of the Docker backend
// (its client, iptables, the guard), and neither backend imports the
// other. It imports nothing of the runtime but proxy, whose Pattern is the
// allow list's type, and probe, whose checks fill a Report's rows.
package topospec

import (
	"net/netip"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

// Network kinds of the Docker part, in the order they are created.
const (
	LLMNet    = "llmnet"
	FetchNet  = "fetchnet"
	EgressNet = "egressnet"
)

// Kinds lists the network kinds of a topology on Docker.
var Kinds = []string{LLMNet, FetchNet, EgressNet}

// Roles, as the `roles` output names them.
const (
	RoleCore     = "CORE"
	RoleFetch    = "FETCH"
	RoleToolExec = "TOOL_EXEC"
	RoleProxy    = "PROXY"
)

// DefaultProxyPort is the port the proxy listens on when none is set.
const DefaultProxyPort = 3128

// MaxNameLen keeps every derived name within the kernel's and the
// cluster's limits: the input chain "TGI-<name>" must fit iptables' 28
// characters.
const MaxNameLen = 24

// ProxyBinary is where a proxy image holds agent-runner.
const ProxyBinary = "/usr/local/bin/agent-runner"

// Input is what a user writes. Empty strings and nil mean "not set".
type Input struct {
	Name   string
	Proxy  ProxyInput
	Docker DockerInput
}

// ProxyInput is the neutral part of the user's proxy block.
type ProxyInput struct {
	// Image contains ProxyBinary (an isolation image).
	Image string
	// Allow is the allowlist, in proxy.ParsePattern's grammar.
	Allow []string
	// Port the proxy listens on; 0: DefaultProxyPort.
	Port int
	// DNS are the IPv4 resolvers the proxy asks.
	DNS []string
	// UpstreamCA is PEM of extra CAs a bound host's certificate may chain
	// to (a private API's); "": the system's roots only.
	UpstreamCA string
}

// DockerInput is what only a Docker host can honour: the networks'
// subnets and gateways, the proxy's pinned addresses, the private ranges
// it may reach, the host firewall. A cluster backend refuses each one set.
type DockerInput struct {
	Subnets      map[string]string // kind -> CIDR
	Gateways     map[string]string // kind -> address
	ProxyIP      string            // on fetchnet
	EgressIP     string            // on egressnet
	AllowPrivate []string          // CIDRs the proxy may reach although private; nil: not set
	// Firewall nil means the backend's default (on Docker: enabled,
	// without logging).
	Firewall *Firewall
}

// Firewall says whether the host firewall is enforced and whether denied
// packets are logged.
type Firewall struct {
	Enabled   bool `json:"enabled"`
	LogDenied bool `json:"log_denied"`
}

// Spec is a complete, validated topology, as a backend planned it. Its
// values are typed; nothing in it is parsed again.
type Spec struct {
	Name   string `json:"name"`
	Proxy  Proxy  `json:"proxy"`
	Docker Docker `json:"docker,omitzero"`
}

// Proxy is the planned proxy, on every backend.
type Proxy struct {
	Image string          `json:"image"`
	Allow proxy.Allowlist `json:"allow"`
	Port  int             `json:"port"`
	DNS   []netip.Addr    `json:"dns,omitempty"`
	// UpstreamCA is checked PEM (proxy.ParseUpstreamCA).
	UpstreamCA string `json:"upstream_ca,omitempty"`
}

// Docker is the part of a spec only a Docker host has; zero on a cluster.
type Docker struct {
	Networks     []Network      `json:"networks,omitempty"` // in Kinds order
	ProxyIP      netip.Addr     `json:"proxy_ip,omitzero"`
	EgressIP     netip.Addr     `json:"egress_ip,omitzero"`
	AllowPrivate []netip.Prefix `json:"allow_private,omitempty"`
	Firewall     Firewall       `json:"firewall,omitzero"`
}

// IsZero reports whether no Docker setting is present.
func (d Docker) IsZero() bool {
	return len(d.Networks) == 0 && !d.ProxyIP.IsValid() && !d.EgressIP.IsValid() && len(d.AllowPrivate) == 0 && d.Firewall == Firewall{}
}

// Network is one planned Docker network.
type Network struct {
	Kind     string       `json:"kind"`
	Name     string       `json:"name"`
	Subnet   netip.Prefix `json:"subnet"`
	Gateway  netip.Addr   `json:"gateway"`
	IPRange  netip.Prefix `json:"ip_range"` // where Docker may hand out addresses; pinned ones sit below it
	Internal bool         `json:"internal"`
}

// Network returns the Docker network of the given kind (zero on a cluster).
func (s Spec) Network(kind string) Network {
	for _, n := range s.Docker.Networks {
		if n.Kind == kind {
			return n
		}
	}
	return Network{}
}

// ProxyName names the proxy: its container on Docker, its Deployment and
// Service on a cluster.
func ProxyName(name string) string { return name + "-proxy" }

// ProxyURL is the proxy at addr on the spec's port.
func (s Spec) ProxyURL(addr netip.Addr) string {
	return "http://" + netip.AddrPortFrom(addr, uint16(s.Proxy.Port)).String()
}

// Input renders the spec back as what a user writes (import, and the
// backends' checks of a spec they are handed). It only formats; nothing is
// parsed.
func (s Spec) Input() Input {
	in := Input{Name: s.Name, Proxy: ProxyInput{Image: s.Proxy.Image, Port: s.Proxy.Port, UpstreamCA: s.Proxy.UpstreamCA}}
	in.Proxy.Allow = s.Proxy.Allow.Strings()
	for _, d := range s.Proxy.DNS {
		in.Proxy.DNS = append(in.Proxy.DNS, d.String())
	}
	d := s.Docker
	if d.IsZero() {
		return in
	}
	in.Docker = DockerInput{Subnets: map[string]string{}, Gateways: map[string]string{}}
	for _, n := range d.Networks {
		in.Docker.Subnets[n.Kind], in.Docker.Gateways[n.Kind] = n.Subnet.String(), n.Gateway.String()
	}
	if d.ProxyIP.IsValid() {
		in.Docker.ProxyIP = d.ProxyIP.String()
	}
	if d.EgressIP.IsValid() {
		in.Docker.EgressIP = d.EgressIP.String()
	}
	for _, p := range d.AllowPrivate {
		in.Docker.AllowPrivate = append(in.Docker.AllowPrivate, p.String())
	}
	fw := d.Firewall
	in.Docker.Firewall = &fw
	return in
}

// BuildProxy checks and parses the neutral proxy settings, the same on
// every backend: an image, a TCP port, the allow list (each entry with
// proxy.ParsePattern, duplicates dropped) and IPv4 DNS servers. This is
// where the allow list is parsed; from here on it is typed.
func BuildProxy(in ProxyInput, ps *fault.List) Proxy {
	p := Proxy{Image: in.Image, Port: in.Port, Allow: proxy.Allowlist{}, UpstreamCA: in.UpstreamCA}
	if in.UpstreamCA != "" {
		if _, err := proxy.ParseUpstreamCA(in.UpstreamCA); err != nil {
			ps.Add("proxy.upstream_ca", -1, "Invalid Upstream CA", "%v.", err)
		}
	}
	if in.Image == "" {
		ps.Add("proxy.image", -1, "Missing Proxy Image", "proxy.image must name an isolation image that contains agent-runner.")
	}
	if p.Port == 0 {
		p.Port = DefaultProxyPort
	}
	if p.Port < 1 || p.Port > 65535 {
		ps.Add("proxy.port", -1, "Invalid Proxy Port", "%d is not a TCP port; use 1 to 65535.", in.Port)
	}
	seen := map[proxy.Pattern]bool{}
	for i, raw := range in.Allow {
		e, err := proxy.ParsePattern(raw)
		if err != nil {
			ps.Add("proxy.allow", i, "Invalid Allow Pattern", "%v", err)
			continue
		}
		if !seen[e] {
			seen[e] = true
			p.Allow = append(p.Allow, e)
		}
	}
	for i, raw := range in.DNS {
		a, err := netip.ParseAddr(raw)
		if err != nil || !a.Is4() {
			ps.Add("proxy.dns", i, "Invalid DNS Server", "%q is not an IPv4 address.", raw)
			continue
		}
		p.DNS = append(p.DNS, a)
	}
	return p
}

// ProxyCommand is the proxy container's command line, derived from the
// spec and never read back. On Docker the proxy listens only on its
// fetchnet address, so nothing on egressnet can use it; on a cluster (no
// pinned address) it listens on all of the pod's addresses, and the
// policies decide who reaches it. The audit log goes to stdout.
func ProxyCommand(s Spec) []string {
	set := proxy.Settings{Port: s.Proxy.Port, Audit: "-", Allow: s.Proxy.Allow, UpstreamCA: s.Proxy.UpstreamCA}
	if s.Docker.ProxyIP.IsValid() {
		set.ListenIP = s.Docker.ProxyIP.String()
	}
	for _, d := range s.Proxy.DNS {
		set.DNS = append(set.DNS, d.String())
	}
	for _, p := range s.Docker.AllowPrivate {
		set.AllowPrivate = append(set.AllowPrivate, p.String())
	}
	return append([]string{ProxyBinary}, proxy.Args(set)...)
}
