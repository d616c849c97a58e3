package kube

import (
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
)

// Pod labels of ThreeGate members. The domain is engine.LabelPrefix
// ("io.meepa.") read the DNS way round, as Kubernetes label keys are
// written; a test keeps the two in step.
const (
	threegateLabelDomain = "meepa.io/"
	// ThreeGateLabelTopology carries the topology's name on every member.
	ThreeGateLabelTopology = threegateLabelDomain + "threegate"
	// ThreeGateLabelRole carries the member's role, as topology names it
	// (CORE, FETCH, TOOL_EXEC, PROXY).
	ThreeGateLabelRole = threegateLabelDomain + "threegate-role"
	// ThreeGateLabelExecution is "true" on a per-message execution pod.
	// A TOOL_EXEC execution pod gets no network at all.
	ThreeGateLabelExecution = threegateLabelDomain + "threegate-execution"
)

// ThreeGateMemberLabels are the labels a member's pod must carry for the
// policies of PolicyInput to govern it: the runner of an agent of role in
// topology name (execution false) or one of its per-message pods (true).
func ThreeGateMemberLabels(name, role string, execution bool) map[string]string {
	l := map[string]string{ThreeGateLabelTopology: name, ThreeGateLabelRole: role}
	if execution {
		l[ThreeGateLabelExecution] = "true"
	}
	return l
}

// ThreeGatePolicies turns a topology into its NetworkPolicies: deny by
// default in both directions for every member, then exactly the
// connectivity of the ThreeGate specification:
//
//	CORE, FETCH, TOOL_EXEC   → the LLM endpoint (llmnet)
//	FETCH                    → the proxy pods, on the proxy port (fetchnet)
//	TOOL_EXEC execution pods → nothing
//	PROXY                    ← FETCH on the proxy port
//	PROXY                    → tcp/443, and DNS (udp and tcp 53), on
//	                           public addresses only (egressnet)
//
// No member reaches another member any other way, the nodes, the API
// server or the metadata service. in is validated first; a topology that
// cannot be expressed safely is an error and gives no policies.
func ThreeGatePolicies(in PolicyInput) ([]netv1.NetworkPolicy, error) {
	n, err := in.normalized()
	if err != nil {
		return nil, err
	}
	pols := []netv1.NetworkPolicy{
		n.policy("default-deny", n.members(), nil, nil),
		n.policy("llm", n.roles(topology.RoleCore, topology.RoleFetch), nil, n.llmEgress()),
		n.policy("tool-exec-llm", n.toolExecRunner(), nil, n.llmEgress()),
		n.policy("fetch-proxy", n.roles(topology.RoleFetch), nil, []netv1.NetworkPolicyEgressRule{{
			To:    []netv1.NetworkPolicyPeer{{PodSelector: n.proxySelector()}},
			Ports: tcp(n.ProxyPort),
		}}),
		n.policy("proxy", n.proxySelector(), []netv1.NetworkPolicyIngressRule{{
			From:  []netv1.NetworkPolicyPeer{{PodSelector: n.roles(topology.RoleFetch)}},
			Ports: tcp(n.ProxyPort),
		}}, n.proxyEgress()),
	}
	return pols, nil
}

// policy makes one policy named <topology>-<suffix> for the pods sel
// selects. Every policy states both directions, so a policy that allows
// only egress still leaves its pods isolated for ingress.
func (n normalized) policy(suffix string, sel *metav1.LabelSelector, in []netv1.NetworkPolicyIngressRule, out []netv1.NetworkPolicyEgressRule) netv1.NetworkPolicy {
	return netv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      n.Name + "-" + suffix,
			Namespace: n.Namespace,
			Labels: map[string]string{
				threegateLabelDomain + "managed-by": engine.ManagedByValue,
				ThreeGateLabelTopology:              n.Name,
			},
		},
		Spec: netv1.NetworkPolicySpec{
			PodSelector: *sel,
			PolicyTypes: []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress},
			Ingress:     in,
			Egress:      out,
		},
	}
}

// members selects every pod of the topology.
func (n normalized) members() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{ThreeGateLabelTopology: n.Name}}
}

// roles selects the topology's pods of the given roles, runners and
// execution pods alike.
func (n normalized) roles(roles ...string) *metav1.LabelSelector {
	sel := n.members()
	if len(roles) == 1 {
		sel.MatchLabels[ThreeGateLabelRole] = roles[0]
		return sel
	}
	sel.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: ThreeGateLabelRole, Operator: metav1.LabelSelectorOpIn, Values: roles}}
	return sel
}

// toolExecRunner selects TOOL_EXEC pods that are not execution pods.
func (n normalized) toolExecRunner() *metav1.LabelSelector {
	sel := n.roles(topology.RoleToolExec)
	sel.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: ThreeGateLabelExecution, Operator: metav1.LabelSelectorOpDoesNotExist}}
	return sel
}

// proxySelector selects the proxy pods: the PROXY role and any extra
// labels the input names.
func (n normalized) proxySelector() *metav1.LabelSelector {
	sel := n.roles(topology.RoleProxy)
	for k, v := range n.ProxyLabels {
		sel.MatchLabels[k] = v
	}
	return sel
}

// llmEgress reaches the LLM endpoint's CIDRs, minus the nodes, the API
// server and link-local space inside them, on its ports.
func (n normalized) llmEgress() []netv1.NetworkPolicyEgressRule {
	var to []netv1.NetworkPolicyPeer
	for _, c := range n.LLM.CIDRs {
		to = append(to, ipBlock(c, inside(c, n.forbidden)))
	}
	return []netv1.NetworkPolicyEgressRule{{To: to, Ports: tcp(n.LLM.Ports...)}}
}

// proxyEgress reaches public addresses on tcp/443, and DNS on udp and tcp
// 53: the configured resolvers, or any public address without them.
func (n normalized) proxyEgress() []netv1.NetworkPolicyEgressRule {
	public := ipBlock(netip.MustParsePrefix("0.0.0.0/0"), n.private)
	dns := []netv1.NetworkPolicyPeer{public}
	if len(n.ProxyDNS) > 0 {
		dns = nil
		for _, a := range n.ProxyDNS {
			dns = append(dns, ipBlock(netip.PrefixFrom(a, 32), nil))
		}
	}
	udp, tcp53 := corev1.ProtocolUDP, corev1.ProtocolTCP
	port53 := intstr.FromInt32(53)
	return []netv1.NetworkPolicyEgressRule{
		{To: []netv1.NetworkPolicyPeer{public}, Ports: tcp(443)},
		{To: dns, Ports: []netv1.NetworkPolicyPort{{Protocol: &udp, Port: &port53}, {Protocol: &tcp53, Port: &port53}}},
	}
}

func ipBlock(cidr netip.Prefix, except []netip.Prefix) netv1.NetworkPolicyPeer {
	b := &netv1.IPBlock{CIDR: cidr.String()}
	for _, e := range except {
		b.Except = append(b.Except, e.String())
	}
	return netv1.NetworkPolicyPeer{IPBlock: b}
}

func tcp(ports ...int) []netv1.NetworkPolicyPort {
	out := make([]netv1.NetworkPolicyPort, 0, len(ports))
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		port := intstr.FromInt32(int32(p)) // validated to 1..65535
		out = append(out, netv1.NetworkPolicyPort{Protocol: &proto, Port: &port})
	}
	return out
}

// inside returns the prefixes of set that lie strictly inside c.
func inside(c netip.Prefix, set []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range set {
		if p.Bits() > c.Bits() && c.Contains(p.Addr()) {
			out = append(out, p)
		}
	}
	return out
}

// minimal sorts prefixes and drops those inside another, so an except
// list names each range once.
func minimal(ps []netip.Prefix) []netip.Prefix {
	ps = append([]netip.Prefix(nil), ps...)
	sort.Slice(ps, func(i, j int) bool {
		if c := ps[i].Addr().Compare(ps[j].Addr()); c != 0 {
			return c < 0
		}
		return ps[i].Bits() < ps[j].Bits()
	})
	var out []netip.Prefix
	for _, p := range ps {
		if len(out) > 0 && out[len(out)-1].Contains(p.Addr()) && out[len(out)-1].Bits() <= p.Bits() {
			continue
		}
		out = append(out, p)
	}
	return out
}
