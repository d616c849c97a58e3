package kube

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
)

// PolicyInput is what ThreeGatePolicies needs to know about a topology and
// the cluster it runs on.
type PolicyInput struct {
	// Name is the topology's name: the value of ThreeGateLabelTopology on
	// its members and the prefix of its policies' names.
	Name      string
	Namespace string
	// LLM is the endpoint the members talk to the model through.
	LLM LLMEndpoint
	// ProxyPort is where the proxy listens; 0: topology.DefaultProxyPort.
	ProxyPort int
	// ProxyLabels are labels the proxy pods carry besides the member
	// labels, narrowing which PROXY pods FETCH may reach; nil: none.
	ProxyLabels map[string]string
	// ProxyDNS are the resolvers the proxy may ask; they must be public
	// addresses. Empty: any public address on port 53.
	ProxyDNS []netip.Addr
	Cluster  ClusterNetwork
}

// LLMEndpoint is the model endpoint: its addresses and TCP ports.
type LLMEndpoint struct {
	CIDRs []netip.Prefix
	Ports []int
}

// ClusterNetwork names the cluster's own addresses, which no member may
// reach: none of them is private by nature (a node or an API server may
// have a public address, a pod or service range may be anywhere).
type ClusterNetwork struct {
	PodCIDRs     []netip.Prefix
	ServiceCIDRs []netip.Prefix
	// Nodes are the nodes' addresses or ranges.
	Nodes []netip.Prefix
	// APIServer are the API server's addresses, as the members could dial
	// them (its endpoint addresses and the kubernetes Service's address).
	APIServer []netip.Addr
}

// privateRanges are never egress for the proxy: RFC 1918, link-local
// (the metadata service), shared address space, loopback, "this network",
// multicast and reserved.
var privateRanges = []netip.Prefix{
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

// metadataRange holds the cloud metadata services (169.254.169.254 and
// its kin); no LLM endpoint may lie in it.
var metadataRange = netip.MustParsePrefix("169.254.0.0/16")

// PolicyInputError is an input ThreeGatePolicies refuses; Field names it
// (name, namespace, llm.cidrs, llm.ports, proxy.port, proxy.labels,
// proxy.dns, cluster.*).
type PolicyInputError struct {
	Field  string
	Detail string
}

func (e *PolicyInputError) Error() string { return e.Field + ": " + e.Detail }

// normalized is a validated PolicyInput with the derived address sets.
type normalized struct {
	PolicyInput
	forbidden []netip.Prefix // nodes, API server, metadata: unreachable for all
	private   []netip.Prefix // forbidden, cluster ranges and private space: never the proxy's egress
}

func (in PolicyInput) normalized() (normalized, error) {
	n := normalized{PolicyInput: in}
	if n.ProxyPort == 0 {
		n.ProxyPort = topology.DefaultProxyPort
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &PolicyInputError{Field: field, Detail: fmt.Sprintf(format, args...)})
	}
	checkNames(in, bad)
	cl := in.Cluster
	for field, ps := range map[string][]netip.Prefix{"cluster.pod_cidrs": cl.PodCIDRs, "cluster.service_cidrs": cl.ServiceCIDRs, "cluster.nodes": cl.Nodes} {
		for _, p := range ps {
			if !p.IsValid() || !p.Addr().Is4() || p.Masked() != p {
				bad(field, "%s is not an IPv4 CIDR without host bits", p)
			}
		}
	}
	if len(cl.PodCIDRs) == 0 || len(cl.ServiceCIDRs) == 0 || len(cl.Nodes) == 0 || len(cl.APIServer) == 0 {
		bad("cluster", "the pod and service CIDRs, the node addresses and the API server's addresses are all required: without them a member could reach the cluster itself")
	}
	n.forbidden = append(n.forbidden, cl.Nodes...)
	n.forbidden = append(n.forbidden, metadataRange)
	for _, a := range cl.APIServer {
		if !a.Is4() {
			bad("cluster.api_server", "%s is not an IPv4 address", a)
			continue
		}
		n.forbidden = append(n.forbidden, netip.PrefixFrom(a, 32))
	}
	n.forbidden = minimal(n.forbidden)
	n.private = minimal(append(append(append(append([]netip.Prefix(nil), n.forbidden...), privateRanges...), cl.PodCIDRs...), cl.ServiceCIDRs...))
	n.checkLLM(bad)
	n.checkProxy(bad)
	if err := errors.Join(errs...); err != nil {
		return normalized{}, err
	}
	return n, nil
}

// checkNames checks the names that become object names and labels.
func checkNames(in PolicyInput, bad func(field, format string, args ...any)) {
	if msgs := validation.IsDNS1123Label(in.Name); len(msgs) > 0 || len(in.Name) > topology.MaxNameLen {
		bad("name", "%q is not a topology name (1 to %d lower-case letters, digits and '-')", in.Name, topology.MaxNameLen)
	}
	if msgs := validation.IsDNS1123Label(in.Namespace); len(msgs) > 0 {
		bad("namespace", "%q: %s", in.Namespace, strings.Join(msgs, "; "))
	}
	for k, v := range in.ProxyLabels {
		msgs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...)
		if strings.HasPrefix(k, threegateLabelDomain) {
			msgs = append(msgs, "keys under "+threegateLabelDomain+" are the provider's")
		}
		if len(msgs) > 0 {
			bad("proxy.labels", "%s=%s: %s", k, v, strings.Join(msgs, "; "))
		}
	}
}

// checkLLM: the endpoint is a set of IPv4 ranges no wider than /8 that
// are not inside the nodes, the API server or link-local space (those
// inside it are cut out of it instead), and at least one port.
func (n normalized) checkLLM(bad func(field, format string, args ...any)) {
	if len(n.LLM.CIDRs) == 0 {
		bad("llm.cidrs", "name at least one address range of the LLM endpoint")
	}
	for _, c := range n.LLM.CIDRs {
		switch {
		case !c.IsValid() || !c.Addr().Is4() || c.Masked() != c:
			bad("llm.cidrs", "%s is not an IPv4 CIDR without host bits", c)
		case c.Bits() < 8:
			bad("llm.cidrs", "%s is wider than /8: that is the internet, not an endpoint", c)
		default:
			for _, f := range n.forbidden {
				if f.Bits() <= c.Bits() && f.Contains(c.Addr()) {
					bad("llm.cidrs", "%s lies inside %s, a node, the API server or the metadata range, which no member may reach", c, f)
				}
			}
		}
	}
	if len(n.LLM.Ports) == 0 {
		bad("llm.ports", "name at least one TCP port of the LLM endpoint")
	}
	for _, p := range n.LLM.Ports {
		if p < 1 || p > 65535 {
			bad("llm.ports", "%d is not a TCP port (1 to 65535)", p)
		}
	}
}

// checkProxy: a port, and resolvers on public addresses only.
func (n normalized) checkProxy(bad func(field, format string, args ...any)) {
	if n.ProxyPort < 1 || n.ProxyPort > 65535 {
		bad("proxy.port", "%d is not a TCP port (1 to 65535)", n.ProxyPort)
	}
	for _, a := range n.ProxyDNS {
		if !a.Is4() {
			bad("proxy.dns", "%s is not an IPv4 address", a)
			continue
		}
		for _, p := range n.private {
			if p.Contains(a) {
				bad("proxy.dns", "%s lies in %s: the proxy's DNS goes to public addresses only", a, p)
				break
			}
		}
	}
}
