// Package kubetopology is the ThreeGate topology on Kubernetes: the
// topology's NetworkPolicies (kube.ThreeGatePolicies) and its egress proxy
// as a Deployment and a Service, applied, read back for drift, imported
// and torn down. It is the cluster counterpart of package topology, which
// does the same with Docker networks and iptables; it shares that
// package's roles, allowlist grammar and proxy defaults.
package kubetopology

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
)

// Input is what a user writes for a topology on a cluster. There are no
// networks, subnets or pinned addresses to choose: the pod network is the
// cluster's, and the policies replace the networks.
type Input struct {
	Name  string
	Proxy ProxyInput
}

// ProxyInput is the user's proxy block.
type ProxyInput struct {
	// Image contains /usr/local/bin/agent-runner (an isolation image).
	Image string
	// Allow is the allowlist, in topology.ParseAllow's grammar.
	Allow []string
	// Port the proxy listens on; 0: topology.DefaultProxyPort.
	Port int
	// DNS are the public resolvers the proxy asks (IPv4). The cluster's
	// DNS is not among the proxy's destinations, so an allowlist that
	// names hosts needs at least one.
	DNS []string
}

// Spec is a validated topology.
type Spec struct {
	Name  string
	Proxy Proxy
}

// Proxy is the planned proxy.
type Proxy struct {
	Image string
	Allow []topology.AllowEntry
	Port  int
	DNS   []netip.Addr
}

// Build validates in and plans the topology. Problems carry the attribute
// path (Field "name" or "proxy", Sub the proxy attribute), as topology's
// do, so the provider maps them the same way.
func Build(in Input) (Spec, topology.Problems) {
	var ps topology.Problems
	add := func(field, sub string, index int, summary, format string, args ...any) {
		ps = append(ps, topology.Problem{Field: field, Sub: sub, Index: index, Summary: summary, Detail: fmt.Sprintf(format, args...)})
	}
	s := Spec{Name: in.Name, Proxy: Proxy{Image: in.Proxy.Image, Port: in.Proxy.Port}}
	if msgs := validation.IsDNS1123Label(in.Name); len(msgs) > 0 || len(in.Name) > topology.MaxNameLen {
		add("name", "", -1, "Invalid Topology Name",
			"%q: use 1 to %d lower-case letters, digits and '-', starting and ending with a letter or digit.", in.Name, topology.MaxNameLen)
	}
	if s.Proxy.Image == "" {
		add("proxy", "image", -1, "Missing Proxy Image", "proxy.image must name an isolation image that contains agent-runner.")
	}
	if s.Proxy.Port == 0 {
		s.Proxy.Port = topology.DefaultProxyPort
	}
	if s.Proxy.Port < 1 || s.Proxy.Port > 65535 {
		add("proxy", "port", -1, "Invalid Proxy Port", "%d is not a TCP port; use 1 to 65535.", in.Proxy.Port)
	}
	var hosts []string
	for i, raw := range in.Proxy.Allow {
		e, err := topology.ParseAllow(raw)
		if err != nil {
			add("proxy", "allow", i, "Invalid Allow Pattern", "%v", err)
			continue
		}
		s.Proxy.Allow = append(s.Proxy.Allow, e)
		if _, err := netip.ParseAddr(strings.Trim(e.Host, "[]")); err != nil {
			hosts = append(hosts, e.Host)
		}
	}
	for i, raw := range in.Proxy.DNS {
		a, err := netip.ParseAddr(raw)
		if err != nil || !a.Is4() {
			add("proxy", "dns", i, "Invalid DNS Server", "%q is not an IPv4 address.", raw)
			continue
		}
		s.Proxy.DNS = append(s.Proxy.DNS, a)
	}
	if len(hosts) > 0 && len(in.Proxy.DNS) == 0 {
		add("proxy", "dns", -1, "Missing DNS Server",
			"the allow list names hosts (%s) but proxy.dns is empty: on a cluster the proxy may not ask the cluster's DNS, "+
				"only public resolvers; name one or more (e.g. 9.9.9.9).", strings.Join(hosts, ", "))
	}
	return s, ps
}

// Input turns the spec back into what a user writes (for import).
func (s Spec) Input() Input {
	in := Input{Name: s.Name, Proxy: ProxyInput{Image: s.Proxy.Image, Port: s.Proxy.Port}}
	for _, e := range s.Proxy.Allow {
		in.Proxy.Allow = append(in.Proxy.Allow, e.String())
	}
	for _, d := range s.Proxy.DNS {
		in.Proxy.DNS = append(in.Proxy.DNS, d.String())
	}
	return in
}

// ProxyName names the proxy's Deployment and Service.
func ProxyName(name string) string { return name + "-proxy" }

// ProxyBinary is where the proxy's image holds agent-runner.
const ProxyBinary = "/usr/local/bin/agent-runner"

// ProxyCommand is the proxy container's command line. The proxy listens on
// all of the pod's addresses: the pod has one interface, and the policies,
// not the listen address, decide who reaches it. The audit log goes to
// stdout, where the cluster's log collection finds it.
func ProxyCommand(s Spec) []string {
	set := proxy.Settings{Port: s.Proxy.Port, Audit: "-"}
	for _, a := range s.Proxy.Allow {
		set.Allow = append(set.Allow, a.String())
	}
	for _, d := range s.Proxy.DNS {
		set.DNS = append(set.DNS, d.String())
	}
	return append([]string{ProxyBinary}, proxy.Args(set)...)
}
