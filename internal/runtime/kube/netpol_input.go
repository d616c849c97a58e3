package kube

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// DefaultRunnerPort is where a runner pod serves its HTTP API when
// PolicyInput names no port; it is kubedeploy.DefaultPort (a test of
// kubetopology keeps the two equal: kubedeploy imports this package).
const DefaultRunnerPort = 8080

// PolicyInput is what ThreeGatePolicies needs to know about a topology and
// the cluster it runs on.
type PolicyInput struct {
	// Name is the topology's name: the value of ThreeGateLabelTopology on
	// its members and the prefix of its policies' names.
	Name      string
	Namespace string
	// RunnerPort is where runner pods serve their API; 0: DefaultRunnerPort.
	RunnerPort int
	// ProxyPort is where the proxy listens; 0: topospec.DefaultProxyPort.
	ProxyPort int
	// ProxyLabels are labels the proxy pods carry besides the member
	// labels, narrowing which PROXY pods FETCH may reach; nil: none.
	ProxyLabels map[string]string
	// ProxyDNS are the resolvers the proxy may ask; they must be public
	// addresses. Empty: any public address on port 53.
	ProxyDNS []netip.Addr
	Cluster  ClusterNetwork
}

// LLMEndpoint is the model endpoint of one agent: its addresses and TCP
// ports, as its llm.base_url resolves.
type LLMEndpoint struct {
	CIDRs []netip.Prefix
	Ports []int
	// Host is the base URL's host name when it is not an address: the
	// runner pod, which has no DNS (MemberDNS), finds it at CIDRs through
	// its hostAliases (MemberHostAliases).
	Host string
}

// ClusterNetwork names the cluster's own addresses, which no member may
// reach but as the policies say: none of them is private by nature (a node
// or an API server may have a public address, a pod or service range may
// be anywhere). DiscoverCluster reads it from the cluster.
type ClusterNetwork struct {
	PodCIDRs     []netip.Prefix
	ServiceCIDRs []netip.Prefix
	// Nodes are the nodes' addresses or ranges.
	Nodes []netip.Prefix
	// APIServer is every address and port the API server answers on as a
	// pod could dial it: its endpoints and the kubernetes Service's
	// address. Runner pods reach exactly these pairs.
	APIServer []netip.AddrPort
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

// PolicyInputError is an input ThreeGatePolicies or AgentLLMPolicy
// refuses; Field names it (name, namespace, agent_id, runner_labels,
// llm.cidrs, llm.ports, runner.port, proxy.port, proxy.labels, proxy.dns,
// cluster.*).
type PolicyInputError struct {
	Field  string
	Detail string
}

func (e *PolicyInputError) Error() string { return e.Field + ": " + e.Detail }

// problems gathers PolicyInputErrors.
type problems []error

func (ps *problems) bad(field, format string, args ...any) {
	*ps = append(*ps, &PolicyInputError{Field: field, Detail: fmt.Sprintf(format, args...)})
}

// normalized is a validated PolicyInput with the derived address sets.
type normalized struct {
	PolicyInput
	cluster clusterSets
}

// clusterSets are the address sets every policy derives from the cluster.
type clusterSets struct {
	forbidden []netip.Prefix // nodes, API server, metadata: unreachable but by rule
	private   []netip.Prefix // forbidden, cluster ranges and private space: never the proxy's egress
}

func (in PolicyInput) normalized() (normalized, error) {
	n := normalized{PolicyInput: in}
	if n.ProxyPort == 0 {
		n.ProxyPort = topospec.DefaultProxyPort
	}
	if n.RunnerPort == 0 {
		n.RunnerPort = DefaultRunnerPort
	}
	var ps problems
	checkTopology(in.Name, in.Namespace, &ps)
	for k, v := range in.ProxyLabels {
		checkLabel("proxy.labels", k, v, &ps)
	}
	n.cluster = in.Cluster.sets(&ps)
	checkPort("runner.port", n.RunnerPort, &ps)
	checkPort("proxy.port", n.ProxyPort, &ps)
	if n.RunnerPort == n.ProxyPort {
		ps.bad("proxy.port", "%d is the runner port too; give the proxy a port of its own", n.ProxyPort)
	}
	for _, a := range n.ProxyDNS {
		if !a.Is4() {
			ps.bad("proxy.dns", "%s is not an IPv4 address", a)
			continue
		}
		for _, p := range n.cluster.private {
			if p.Contains(a) {
				ps.bad("proxy.dns", "%s lies in %s: the proxy's DNS goes to public addresses only", a, p)
				break
			}
		}
	}
	if err := errors.Join(ps...); err != nil {
		return normalized{}, err
	}
	return n, nil
}

// checkTopology checks the names that become object names and labels.
func checkTopology(name, namespace string, ps *problems) {
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 || len(name) > topospec.MaxNameLen {
		ps.bad("name", "%q is not a topology name (1 to %d lower-case letters, digits and '-')", name, topospec.MaxNameLen)
	}
	if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
		ps.bad("namespace", "%q: %s", namespace, strings.Join(msgs, "; "))
	}
}

// checkLabel: a valid label that is not one of the provider's ThreeGate keys.
func checkLabel(field, k, v string, ps *problems) {
	msgs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...)
	if strings.HasPrefix(k, threegateLabelDomain) {
		msgs = append(msgs, "keys under "+threegateLabelDomain+" are the provider's")
	}
	if len(msgs) > 0 {
		ps.bad(field, "%s=%s: %s", k, v, strings.Join(msgs, "; "))
	}
}

func checkPort(field string, p int, ps *problems) {
	if p < 1 || p > 65535 {
		ps.bad(field, "%d is not a TCP port (1 to 65535)", p)
	}
}

// sets validates the cluster's addresses and derives the address sets.
func (cl ClusterNetwork) sets(ps *problems) clusterSets {
	for field, pfxs := range map[string][]netip.Prefix{"cluster.pod_cidrs": cl.PodCIDRs, "cluster.service_cidrs": cl.ServiceCIDRs, "cluster.nodes": cl.Nodes} {
		for _, p := range pfxs {
			if !p.IsValid() || !p.Addr().Is4() || p.Masked() != p {
				ps.bad(field, "%s is not an IPv4 CIDR without host bits", p)
			}
		}
	}
	if len(cl.PodCIDRs) == 0 || len(cl.ServiceCIDRs) == 0 || len(cl.Nodes) == 0 || len(cl.APIServer) == 0 {
		ps.bad("cluster", "the pod and service CIDRs, the node addresses and the API server's addresses are all required (kube.DiscoverCluster reads them): without them a member could reach the cluster itself")
	}
	var s clusterSets
	s.forbidden = append(s.forbidden, cl.Nodes...)
	s.forbidden = append(s.forbidden, metadataRange)
	for _, a := range cl.APIServer {
		if !a.IsValid() || !a.Addr().Is4() || a.Port() == 0 {
			ps.bad("cluster.api_server", "%s is not an IPv4 address and port", a)
			continue
		}
		s.forbidden = append(s.forbidden, netip.PrefixFrom(a.Addr(), 32))
	}
	s.forbidden = minimal(s.forbidden)
	s.private = minimal(append(append(append(append([]netip.Prefix(nil), s.forbidden...), privateRanges...), cl.PodCIDRs...), cl.ServiceCIDRs...))
	return s
}

// checkLLM: the endpoint is a set of IPv4 ranges no wider than /8 that
// are not inside the nodes, the API server or link-local space (those
// inside it are cut out of it instead), and at least one port.
func checkLLM(llm LLMEndpoint, forbidden []netip.Prefix, ps *problems) {
	if len(llm.CIDRs) == 0 {
		ps.bad("llm.cidrs", "name at least one address range of the LLM endpoint")
	}
	for _, c := range llm.CIDRs {
		switch {
		case !c.IsValid() || !c.Addr().Is4() || c.Masked() != c:
			ps.bad("llm.cidrs", "%s is not an IPv4 CIDR without host bits", c)
		case c.Bits() < 8:
			ps.bad("llm.cidrs", "%s is wider than /8: that is the internet, not an endpoint", c)
		default:
			for _, f := range forbidden {
				if f.Bits() <= c.Bits() && f.Contains(c.Addr()) {
					ps.bad("llm.cidrs", "%s lies inside %s, a node, the API server or the metadata range, which no member may reach", c, f)
				}
			}
		}
	}
	if len(llm.Ports) == 0 {
		ps.bad("llm.ports", "name at least one TCP port of the LLM endpoint")
	}
	for _, p := range llm.Ports {
		checkPort("llm.ports", p, ps)
	}
}
