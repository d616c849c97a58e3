// Package kubetopology is the ThreeGate topology on Kubernetes: the
// topology's NetworkPolicies (kube.ThreeGatePolicies) and its egress proxy
// as a Deployment and a Service, applied, read back for drift, imported
// and torn down. Backend is the cluster's topospec.Backend, the
// counterpart of package topology's Docker one: the same Spec (its
// neutral part; the Docker part is refused), roles, allow list and proxy
// command line, from package topospec.
package kubetopology

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// Build validates in and plans the topology: the neutral proxy settings
// (topospec.BuildProxy) and what a cluster adds and refuses (check).
// Problems carry the attribute path, as on Docker, so the provider maps
// them the same way.
func Build(in topospec.Input) (topospec.Spec, fault.List) {
	var ps fault.List
	s := topospec.Spec{Name: in.Name, Proxy: topospec.BuildProxy(in.Proxy, &ps)}
	return s, append(ps, check(s, in.Docker, len(in.Proxy.DNS) > 0)...)
}

// Check is what Apply refuses in a spec it is handed: the same check
// Build runs, on the typed values (nothing is parsed), including every
// Docker setting the spec carries.
func Check(s topospec.Spec) fault.List {
	var ps fault.List
	if s.Proxy.Image == "" {
		ps.Add("proxy.image", -1, "Missing Proxy Image", "proxy.image must name an isolation image that contains agent-runner.")
	}
	if s.Proxy.Port < 1 || s.Proxy.Port > 65535 {
		ps.Add("proxy.port", -1, "Invalid Proxy Port", "%d is not a TCP port; use 1 to 65535.", s.Proxy.Port)
	}
	return append(ps, check(s, s.Input().Docker, len(s.Proxy.DNS) > 0)...)
}

// check: a name the cluster takes as a label value and object name, a
// DNS server when the allow list names hosts (the proxy may not ask the
// cluster's DNS), and none of what only a Docker host has.
func check(s topospec.Spec, d topospec.DockerInput, haveDNS bool) fault.List {
	var ps fault.List
	if msgs := validation.IsDNS1123Label(s.Name); len(msgs) > 0 || len(s.Name) > topospec.MaxNameLen {
		ps.Add("name", -1, "Invalid Topology Name",
			"%q: use 1 to %d lower-case letters, digits and '-', starting and ending with a letter or digit.", s.Name, topospec.MaxNameLen)
	}
	var hosts []string
	for _, e := range s.Proxy.Allow {
		switch {
		case e.IP.IsValid():
		case e.Wildcard:
			hosts = append(hosts, "*."+e.Host)
		default:
			hosts = append(hosts, e.Host)
		}
	}
	if len(hosts) > 0 && !haveDNS {
		ps.Add("proxy.dns", -1, "Missing DNS Server",
			"the allow list names hosts (%s) but proxy.dns is empty: on a cluster the proxy may not ask the cluster's DNS, "+
				"only public resolvers; name one or more (e.g. 9.9.9.9).", strings.Join(hosts, ", "))
	}
	return append(ps, refusals(d)...)
}

// refusals are the Docker settings set in d, which a cluster cannot
// honour, each on its attribute.
func refusals(d topospec.DockerInput) fault.List {
	var ps fault.List
	refuse := func(field, why string) {
		ps.Add(field, -1, "Not On Kubernetes", "%s", why)
	}
	const noNetworks = "a cluster has no Docker networks; the topology's NetworkPolicies take their place. Remove it."
	for _, k := range topospec.Kinds {
		if d.Subnets[k] != "" {
			refuse(k+"_subnet", noNetworks)
		}
	}
	for _, k := range topospec.Kinds {
		if d.Gateways[k] != "" {
			refuse(k+"_gateway", noNetworks)
		}
	}
	if d.ProxyIP != "" || d.EgressIP != "" {
		refuse("proxy.ip", "the proxy is a pod; the cluster gives its address. Remove proxy.ip and proxy.egress_ip.")
	}
	if d.AllowPrivate != nil {
		refuse("proxy.allow_private", "on a cluster the proxy never reaches private addresses (its policy allows public ones only). Remove it.")
	}
	if d.Firewall != nil {
		refuse("firewall", "a cluster enforces the topology with NetworkPolicies, always; there is no host firewall to turn on or off. Remove it.")
	}
	return ps
}
