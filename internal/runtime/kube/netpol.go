package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// Labels of ThreeGate members and objects. The domain is engine.LabelPrefix
// ("io.meepa.") read the DNS way round, as Kubernetes label keys are
// written; a test keeps the two in step.
const (
	threegateLabelDomain = "meepa.io/"
	// ThreeGateLabelTopology carries the topology's name on every member
	// pod and on every object the topology owns.
	ThreeGateLabelTopology = threegateLabelDomain + "threegate"
	// ThreeGateLabelRole carries the member's role, as topology names it
	// (CORE, FETCH, TOOL_EXEC, PROXY).
	ThreeGateLabelRole = threegateLabelDomain + "threegate-role"
	// ThreeGateLabelRunner is "true" on an agent's runner pod.
	ThreeGateLabelRunner = threegateLabelDomain + "threegate-runner"
	// ThreeGateLabelExecution is "true" on a per-message execution pod.
	ThreeGateLabelExecution = threegateLabelDomain + "threegate-execution"
	// ThreeGateLabelAgent names the agent an AgentLLMPolicy belongs to (on
	// the policy object, not on pods).
	ThreeGateLabelAgent = threegateLabelDomain + "threegate-agent"
	// ThreeGateLabelManagedBy marks the objects the provider owns
	// (engine.ManagedByValue).
	ThreeGateLabelManagedBy = threegateLabelDomain + "managed-by"
)

// ThreeGateRunnerLabels are the labels an agent's runner pod carries to be
// governed as the runner of a member of role in topology name.
func ThreeGateRunnerLabels(name, role string) map[string]string {
	return map[string]string{ThreeGateLabelTopology: name, ThreeGateLabelRole: role, ThreeGateLabelRunner: "true"}
}

// ThreeGateExecutionLabels are the labels of a per-message execution pod
// of a member of role in topology name.
func ThreeGateExecutionLabels(name, role string) map[string]string {
	return map[string]string{ThreeGateLabelTopology: name, ThreeGateLabelRole: role, ThreeGateLabelExecution: "true"}
}

// ThreeGateProxyLabels are the labels of the topology's proxy pods.
func ThreeGateProxyLabels(name string) map[string]string {
	return map[string]string{ThreeGateLabelTopology: name, ThreeGateLabelRole: topospec.RoleProxy}
}

// ThreeGateObjectLabels are the ownership labels of every object a
// topology owns (policies, the proxy's Deployment and Service).
func ThreeGateObjectLabels(name string) map[string]string {
	return map[string]string{ThreeGateLabelManagedBy: engine.ManagedByValue, ThreeGateLabelTopology: name}
}

// ThreeGatePolicies turns a topology into its NetworkPolicies, for what
// runs on a cluster: each agent is a runner pod (a Deployment) that makes
// one execution pod per message and talks to it over the pod's attach
// stream, through the API server, never over the pod network. Deny by
// default in both directions for every member, then exactly:
//
//	runner pods (any role)   → the API server's address:port pairs
//	runner pods              ← the nodes, on the runner port (port-forward, probes)
//	CORE runners             → FETCH and TOOL_EXEC runners, on the runner port (ask)
//	FETCH execution pods     → the proxy pods, on the proxy port
//	FETCH runners            → the proxy pods, on the proxy port (revoking
//	                           each message's egress credential)
//	CORE, TOOL_EXEC execution pods → nothing
//	PROXY                    ← FETCH execution pods and runners, on the proxy port
//	PROXY                    → tcp/443, and DNS (udp and tcp 53), on
//	                           public addresses only
//
// A runner's way to its model is per agent: AgentLLMPolicy. No member
// reaches DNS, the nodes or the metadata service otherwise. in is
// validated first; a topology that cannot be expressed safely is an error
// and gives no policies.
func ThreeGatePolicies(in PolicyInput) ([]netv1.NetworkPolicy, error) {
	n, err := in.normalized()
	if err != nil {
		return nil, err
	}
	asked := n.runners(topospec.RoleFetch, topospec.RoleToolExec)
	pols := []netv1.NetworkPolicy{
		n.policy("default-deny", n.members(), nil, nil),
		n.policy("runner", n.runners(), []netv1.NetworkPolicyIngressRule{{
			From:  hostPeers(n.Cluster.Nodes),
			Ports: tcp(n.RunnerPort),
		}}, apiServerEgress(n.Cluster.APIServer)),
		n.policy("core-ask", n.runners(topospec.RoleCore), nil, []netv1.NetworkPolicyEgressRule{{
			To:    []netv1.NetworkPolicyPeer{{PodSelector: asked}},
			Ports: tcp(n.RunnerPort),
		}}),
		n.policy("asked", asked, []netv1.NetworkPolicyIngressRule{{
			From:  []netv1.NetworkPolicyPeer{{PodSelector: n.runners(topospec.RoleCore)}},
			Ports: tcp(n.RunnerPort),
		}}, nil),
		n.policy("fetch-proxy", n.executions(topospec.RoleFetch), nil, []netv1.NetworkPolicyEgressRule{{
			To:    []netv1.NetworkPolicyPeer{{PodSelector: n.proxySelector()}},
			Ports: tcp(n.ProxyPort),
		}}),
		// A FETCH runner revokes each message's egress credential at the
		// proxy (proxy.RevokePath) when the message ends.
		n.policy("fetch-runner-proxy", n.runners(topospec.RoleFetch), nil, []netv1.NetworkPolicyEgressRule{{
			To:    []netv1.NetworkPolicyPeer{{PodSelector: n.proxySelector()}},
			Ports: tcp(n.ProxyPort),
		}}),
		n.policy("proxy", n.proxySelector(), []netv1.NetworkPolicyIngressRule{{
			From:  []netv1.NetworkPolicyPeer{{PodSelector: n.executions(topospec.RoleFetch)}, {PodSelector: n.runners(topospec.RoleFetch)}},
			Ports: tcp(n.ProxyPort),
		}}, n.proxyEgress()),
	}
	return pols, nil
}

// AgentLLMPolicy lets one agent's runner pod reach its model endpoint: the
// endpoint's ranges, minus the nodes, the API server and link-local space
// inside them, on its ports. The policy selects the pods that carry
// runnerLabels (the labels the agent's Deployment selects its pod by, e.g.
// kubedeploy.Labels(agentID)) and the topology's runner label, so it never
// opens anything for a pod outside the topology. It carries
// ThreeGateLabelAgent, so the agent's teardown finds it.
func AgentLLMPolicy(topologyName, namespace, agentID string, runnerLabels map[string]string, llm LLMEndpoint, cluster ClusterNetwork) (netv1.NetworkPolicy, error) {
	var ps problems
	checkTopology(topologyName, namespace, &ps)
	if msgs := validation.IsValidLabelValue(agentID); len(msgs) > 0 || agentID == "" {
		ps.bad("agent_id", "%q is not usable as a label value: %s", agentID, strings.Join(msgs, "; "))
	}
	if len(runnerLabels) == 0 {
		ps.bad("runner_labels", "name the labels the agent's runner pod is selected by (kubedeploy.Labels)")
	}
	for k, v := range runnerLabels {
		checkLabel("runner_labels", k, v, &ps)
	}
	sets := cluster.sets(&ps)
	checkLLM(llm, sets.forbidden, &ps)
	if err := errors.Join(ps...); err != nil {
		return netv1.NetworkPolicy{}, err
	}
	n := normalized{PolicyInput: PolicyInput{Name: topologyName, Namespace: namespace}, cluster: sets}
	sel := n.runners()
	for k, v := range runnerLabels {
		sel.MatchLabels[k] = v
	}
	var to []netv1.NetworkPolicyPeer
	for _, c := range llm.CIDRs {
		to = append(to, ipBlock(c, inside(c, sets.forbidden)))
	}
	p := n.policy("llm-"+agentSuffix(agentID), sel, nil, []netv1.NetworkPolicyEgressRule{{To: to, Ports: tcp(llm.Ports...)}})
	p.Labels[ThreeGateLabelAgent] = agentID
	return p, nil
}

// agentSuffix is the agent id when it can be part of an object name, else
// a cleaned, cut id and a hash of the whole id (so "a_b" and "a-b" differ).
func agentSuffix(id string) string {
	if len(id) <= 40 && len(validation.IsDNS1123Label(id)) == 0 {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	safe := strings.Trim(strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(id)), "-")
	if len(safe) > 30 {
		safe = strings.Trim(safe[:30], "-")
	}
	return safe + "-" + hex.EncodeToString(sum[:4])
}

// policy makes one policy named <topology>-<suffix> for the pods sel
// selects. Every policy states both directions, so a policy that allows
// only egress still leaves its pods isolated for ingress, even when the
// default deny is missing.
func (n normalized) policy(suffix string, sel *metav1.LabelSelector, in []netv1.NetworkPolicyIngressRule, out []netv1.NetworkPolicyEgressRule) netv1.NetworkPolicy {
	return netv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      n.Name + "-" + suffix,
			Namespace: n.Namespace,
			Labels:    ThreeGateObjectLabels(n.Name),
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

// withRoles narrows sel to the given roles (none: every role).
func withRoles(sel *metav1.LabelSelector, roles []string) *metav1.LabelSelector {
	switch len(roles) {
	case 0:
	case 1:
		sel.MatchLabels[ThreeGateLabelRole] = roles[0]
	default:
		sel.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: ThreeGateLabelRole, Operator: metav1.LabelSelectorOpIn, Values: roles}}
	}
	return sel
}

// runners selects the topology's runner pods of the given roles.
func (n normalized) runners(roles ...string) *metav1.LabelSelector {
	sel := n.members()
	sel.MatchLabels[ThreeGateLabelRunner] = "true"
	return withRoles(sel, roles)
}

// executions selects the topology's execution pods of the given roles.
func (n normalized) executions(roles ...string) *metav1.LabelSelector {
	sel := n.members()
	sel.MatchLabels[ThreeGateLabelExecution] = "true"
	return withRoles(sel, roles)
}

// proxySelector selects the proxy pods: the PROXY role and any extra
// labels the input names.
func (n normalized) proxySelector() *metav1.LabelSelector {
	sel := withRoles(n.members(), []string{topospec.RoleProxy})
	for k, v := range n.ProxyLabels {
		sel.MatchLabels[k] = v
	}
	return sel
}

// apiServerEgress reaches each address of the API server on its own
// ports only: one rule per port, so an endpoint's port is never opened
// on the Service's address or the other way round.
func apiServerEgress(api []netip.AddrPort) []netv1.NetworkPolicyEgressRule {
	byPort := map[uint16][]netip.Addr{}
	for _, a := range api {
		byPort[a.Port()] = append(byPort[a.Port()], a.Addr())
	}
	ports := make([]int, 0, len(byPort))
	for p := range byPort {
		ports = append(ports, int(p))
	}
	sort.Ints(ports)
	var out []netv1.NetworkPolicyEgressRule
	for _, p := range ports {
		var to []netv1.NetworkPolicyPeer
		for _, a := range byPort[uint16(p)] {
			to = append(to, ipBlock(netip.PrefixFrom(a, 32), nil))
		}
		out = append(out, netv1.NetworkPolicyEgressRule{To: to, Ports: tcp(p)})
	}
	return out
}

// hostPeers are the nodes' addresses as peers.
func hostPeers(nodes []netip.Prefix) []netv1.NetworkPolicyPeer {
	out := make([]netv1.NetworkPolicyPeer, 0, len(nodes))
	for _, p := range nodes {
		out = append(out, ipBlock(p, nil))
	}
	return out
}

// proxyEgress reaches public addresses on tcp/443, and DNS on udp and tcp
// 53: the configured resolvers, or any public address without them.
func (n normalized) proxyEgress() []netv1.NetworkPolicyEgressRule {
	public := ipBlock(netip.MustParsePrefix("0.0.0.0/0"), n.cluster.private)
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
