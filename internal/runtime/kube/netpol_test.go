package kube

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

const tgNamespace = "agents"

func pfx(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, v := range s {
		out[i] = netip.MustParsePrefix(v)
	}
	return out
}

// testInput is a topology on a cluster whose node, API server and service
// range include addresses that are not private, so that only the
// parameters can keep them out of reach.
func testInput() PolicyInput {
	return PolicyInput{
		Name:        "tg1",
		Namespace:   tgNamespace,
		ProxyLabels: map[string]string{"app": "egress-proxy"},
		Cluster:     testClusterNet(),
	}
}

func testClusterNet() ClusterNetwork {
	return ClusterNetwork{
		PodCIDRs:     pfx("10.244.0.0/16"),
		ServiceCIDRs: pfx("198.18.96.0/24"),
		Nodes:        pfx("10.250.0.1/32", "203.0.113.7/32"),
		APIServer: []netip.AddrPort{
			netip.MustParseAddrPort("10.250.0.1:6443"), netip.MustParseAddrPort("198.18.96.1:443"),
			netip.MustParseAddrPort("192.0.2.10:6443"),
		},
	}
}

// agentLabels stand for kubedeploy.Labels(id): what an agent's Deployment
// selects its runner pod by.
func agentLabels(id string) map[string]string {
	return map[string]string{"io.meepa.managed-by": "terraform-provider-meepa", "io.meepa.component": "runner", "io.meepa.agent": id}
}

// testLLMPolicies: the CORE agent's model is on 10.30.0.0/24 and a range
// that holds a node, the FETCH agent's elsewhere; the TOOL_EXEC agent has
// none.
func testLLMPolicies(t *testing.T) []netv1.NetworkPolicy {
	t.Helper()
	var out []netv1.NetworkPolicy
	for id, llm := range map[string]LLMEndpoint{
		"a-core":  {CIDRs: pfx("10.30.0.0/24", "10.250.0.0/16"), Ports: []int{8080}},
		"a-fetch": {CIDRs: pfx("10.31.0.0/24"), Ports: []int{8443}},
	} {
		p, err := AgentLLMPolicy("tg1", tgNamespace, id, agentLabels(id), llm, testClusterNet())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func tgPod(ip string, l map[string]string) policyEndpoint {
	return policyEndpoint{Namespace: tgNamespace, Labels: l, IP: netip.MustParseAddr(ip)}
}

func tgRunner(ip, role, agent string) policyEndpoint {
	return tgPod(ip, merge(ThreeGateRunnerLabels("tg1", role), agentLabels(agent)))
}

func tgExec(ip, topo, role string) policyEndpoint {
	return tgPod(ip, ThreeGateExecutionLabels(topo, role))
}

func tgProxyPod(ip, topo string, extra map[string]string) policyEndpoint {
	return tgPod(ip, merge(ThreeGateProxyLabels(topo), extra))
}

var (
	extAddr   = func(ip string) policyEndpoint { return policyEndpoint{IP: netip.MustParseAddr(ip)} }
	protoTCP  = corev1.ProtocolTCP
	protoUDP  = corev1.ProtocolUDP
	tgSources = map[string]policyEndpoint{
		"core-runner":    tgRunner("10.244.0.10", topospec.RoleCore, "a-core"),
		"fetch-runner":   tgRunner("10.244.0.12", topospec.RoleFetch, "a-fetch"),
		"tool-runner":    tgRunner("10.244.0.14", topospec.RoleToolExec, "a-tool"),
		"core-exec":      tgExec("10.244.0.11", "tg1", topospec.RoleCore),
		"fetch-exec":     tgExec("10.244.0.13", "tg1", topospec.RoleFetch),
		"tool-exec":      tgExec("10.244.0.15", "tg1", topospec.RoleToolExec),
		"proxy":          tgProxyPod("10.244.0.9", "tg1", map[string]string{"app": "egress-proxy"}),
		"tg2-fetch-exec": tgExec("10.244.0.40", "tg2", topospec.RoleFetch),
		"node":           extAddr("10.250.0.1"),
		"non-member":     tgPod("10.244.0.30", map[string]string{"app": "other"}),
	}
	// tgDestinations: name -> where, protocol, port.
	tgDestinations = map[string]struct {
		to    policyEndpoint
		proto corev1.Protocol
		port  int
	}{
		"api-endpoint":         {extAddr("10.250.0.1"), protoTCP, 6443},
		"api-service":          {extAddr("198.18.96.1"), protoTCP, 443},
		"api-public":           {extAddr("192.0.2.10"), protoTCP, 6443},
		"api-service-6443":     {extAddr("198.18.96.1"), protoTCP, 6443},
		"api-public-443":       {extAddr("192.0.2.10"), protoTCP, 443},
		"node-kubelet":         {extAddr("10.250.0.1"), protoTCP, 10250},
		"node-443":             {extAddr("10.250.0.1"), protoTCP, 443},
		"node-public":          {extAddr("203.0.113.7"), protoTCP, 443},
		"llm":                  {extAddr("10.30.0.5"), protoTCP, 8080},
		"llm-other-port":       {extAddr("10.30.0.5"), protoTCP, 22},
		"llm-udp":              {extAddr("10.30.0.5"), protoUDP, 8080},
		"llm-range-2":          {extAddr("10.250.3.4"), protoTCP, 8080},
		"node-in-llm-range":    {extAddr("10.250.0.1"), protoTCP, 8080},
		"llm2":                 {extAddr("10.31.0.7"), protoTCP, 8443},
		"proxy":                {tgSources["proxy"], protoTCP, 3128},
		"proxy-other-port":     {tgSources["proxy"], protoTCP, 22},
		"proxy-udp":            {tgSources["proxy"], protoUDP, 3128},
		"unlabelled-proxy":     {tgProxyPod("10.244.0.21", "tg1", nil), protoTCP, 3128},
		"other-topology-proxy": {tgProxyPod("10.244.0.20", "tg2", map[string]string{"app": "egress-proxy"}), protoTCP, 3128},
		"core-runner":          {tgSources["core-runner"], protoTCP, 8080},
		"fetch-runner":         {tgSources["fetch-runner"], protoTCP, 8080},
		"fetch-runner-22":      {tgSources["fetch-runner"], protoTCP, 22},
		"tool-runner":          {tgSources["tool-runner"], protoTCP, 8080},
		"fetch-exec":           {tgSources["fetch-exec"], protoTCP, 8080},
		"web-443":              {extAddr("1.1.1.1"), protoTCP, 443},
		"web-80":               {extAddr("1.1.1.1"), protoTCP, 80},
		"web-443-udp":          {extAddr("1.1.1.1"), protoUDP, 443},
		"dns-udp":              {extAddr("1.1.1.1"), protoUDP, 53},
		"dns-tcp":              {extAddr("1.1.1.1"), protoTCP, 53},
		"private-10":           {extAddr("10.1.2.3"), protoTCP, 443},
		"private-172":          {extAddr("172.16.5.5"), protoTCP, 443},
		"private-192":          {extAddr("192.168.1.1"), protoTCP, 443},
		"private-dns":          {extAddr("192.168.1.1"), protoUDP, 53},
		"cgnat":                {extAddr("100.64.0.1"), protoTCP, 443},
		"loopback":             {extAddr("127.0.0.1"), protoTCP, 443},
		"metadata":             {extAddr("169.254.169.254"), protoTCP, 80},
		"metadata-443":         {extAddr("169.254.169.254"), protoTCP, 443},
		"kube-dns":             {extAddr("198.18.96.10"), protoUDP, 53},
		"pod-by-address":       {extAddr("10.244.0.99"), protoTCP, 443},
		"non-member":           {tgSources["non-member"], protoTCP, 80},
	}
	// tg1Members are the destinations that are pods of tg1: whoever is
	// not governed by tg1's policies still meets their ingress side.
	tg1Members = []string{"proxy", "proxy-other-port", "proxy-udp", "unlabelled-proxy", "core-runner", "fetch-runner", "fetch-runner-22", "tool-runner", "fetch-exec"}
)

// TestThreeGateConnectivity is the connectivity table of a topology on a
// cluster, checked row by row against the generated policies (the
// topology's and two agents' LLM policies): every source × destination
// pair not listed as allowed must be denied.
func TestThreeGateConnectivity(t *testing.T) {
	pols, err := ThreeGatePolicies(testInput())
	if err != nil {
		t.Fatal(err)
	}
	pols = append(pols, testLLMPolicies(t)...)
	api := []string{"api-endpoint", "api-service", "api-public"}
	allowed := map[string][]string{
		"core-runner":  append([]string{"llm", "llm-range-2", "fetch-runner", "tool-runner"}, api...),
		"fetch-runner": append([]string{"llm2", "proxy"}, api...), // the proxy: revoking egress credentials
		"tool-runner":  api,
		"core-exec":    nil,
		"fetch-exec":   {"proxy"},
		"tool-exec":    nil,
		"proxy":        {"web-443", "dns-udp", "dns-tcp"},
	}
	// Pods outside the topology (another topology's too: its policies are
	// not in this set) and the node are not governed by tg1's policies:
	// they reach everything but tg1's members, which admit only what the
	// table says. The node reaches the runners' API port.
	isMember := map[string]bool{}
	for _, d := range tg1Members {
		isMember[d] = true
	}
	for d := range tgDestinations {
		if !isMember[d] {
			for _, s := range []string{"tg2-fetch-exec", "node", "non-member"} {
				allowed[s] = append(allowed[s], d)
			}
		}
	}
	allowed["node"] = append(allowed["node"], "core-runner", "fetch-runner", "tool-runner")
	checkTable(t, pols, allowed)
}

func checkTable(t *testing.T, pols []netv1.NetworkPolicy, allowed map[string][]string) {
	t.Helper()
	ev := evaluator{pols}
	for sn, src := range tgSources {
		want := map[string]bool{}
		for _, d := range allowed[sn] {
			want[d] = true
		}
		for dn, d := range tgDestinations {
			got, err := ev.allowed(policyConn{From: src, To: d.to, Proto: d.proto, Port: d.port})
			if err != nil {
				t.Fatalf("%s → %s: %v", sn, dn, err)
			}
			if got != want[dn] {
				t.Errorf("%s → %s (%s/%d): allowed = %v, want %v", sn, dn, d.proto, d.port, got, want[dn])
			}
		}
	}
}

// TestThreeGateProxyDNSServers: with resolvers named, the proxy's DNS goes
// to them only; its 443 stays open to the public.
func TestThreeGateProxyDNSServers(t *testing.T) {
	in := testInput()
	in.ProxyDNS = []netip.Addr{netip.MustParseAddr("9.9.9.9")}
	pols, err := ThreeGatePolicies(in)
	if err != nil {
		t.Fatal(err)
	}
	ev := evaluator{pols}
	for _, c := range []struct {
		ip    string
		proto corev1.Protocol
		port  int
		want  bool
	}{
		{"9.9.9.9", protoUDP, 53, true},
		{"9.9.9.9", protoTCP, 53, true},
		{"9.9.9.9", protoTCP, 443, true},
		{"9.9.9.9", protoTCP, 80, false},
		{"1.1.1.1", protoUDP, 53, false},
		{"1.1.1.1", protoTCP, 53, false},
		{"1.1.1.1", protoTCP, 443, true},
	} {
		got, err := ev.allowed(policyConn{From: tgSources["proxy"], To: extAddr(c.ip), Proto: c.proto, Port: c.port})
		if err != nil || got != c.want {
			t.Errorf("proxy → %s %s/%d: allowed = %v, %v; want %v", c.ip, c.proto, c.port, got, err, c.want)
		}
	}
}

// TestEvaluatorCatchesWrongPolicies: the table above is not vacuous. With
// no policies everything is allowed, and each hole punched into the
// generated set shows up as a wrong row.
func TestEvaluatorCatchesWrongPolicies(t *testing.T) {
	byName := func(p []netv1.NetworkPolicy, name string) *netv1.NetworkPolicy {
		for i := range p {
			if p[i].Name == name {
				return &p[i]
			}
		}
		t.Fatalf("no policy %s", name)
		return nil
	}
	breakages := map[string]struct {
		edit func([]netv1.NetworkPolicy) []netv1.NetworkPolicy
		src  string
		dst  string
	}{
		"no policies": {func([]netv1.NetworkPolicy) []netv1.NetworkPolicy { return nil }, "core-exec", "web-443"},
		"no default deny": {func(p []netv1.NetworkPolicy) []netv1.NetworkPolicy {
			return p[1:]
		}, "tool-exec", "web-80"},
		"proxy without excepts": {func(p []netv1.NetworkPolicy) []netv1.NetworkPolicy {
			for _, r := range byName(p, "tg1-proxy").Spec.Egress {
				for _, peer := range r.To {
					peer.IPBlock.Except = nil
				}
			}
			return p
		}, "proxy", "metadata-443"},
		"api server on every port": {func(p []netv1.NetworkPolicy) []netv1.NetworkPolicy {
			for i := range byName(p, "tg1-runner").Spec.Egress {
				byName(p, "tg1-runner").Spec.Egress[i].Ports = nil
			}
			return p
		}, "tool-runner", "node-kubelet"},
		"llm on every port": {func(p []netv1.NetworkPolicy) []netv1.NetworkPolicy {
			byName(p, "tg1-llm-a-core").Spec.Egress[0].Ports = nil
			return p
		}, "core-runner", "llm-other-port"},
		"llm policy for every runner": {func(p []netv1.NetworkPolicy) []netv1.NetworkPolicy {
			delete(byName(p, "tg1-llm-a-core").Spec.PodSelector.MatchLabels, "io.meepa.agent")
			return p
		}, "tool-runner", "llm"},
		"proxy open to fetch runners": {func(p []netv1.NetworkPolicy) []netv1.NetworkPolicy {
			delete(byName(p, "tg1-proxy").Spec.Ingress[0].From[0].PodSelector.MatchLabels, ThreeGateLabelExecution)
			delete(byName(p, "tg1-fetch-proxy").Spec.PodSelector.MatchLabels, ThreeGateLabelExecution)
			return p
		}, "fetch-runner", "proxy"},
	}
	for name, b := range breakages {
		pols, err := ThreeGatePolicies(testInput())
		if err != nil {
			t.Fatal(err)
		}
		pols = append(pols, testLLMPolicies(t)...)
		d := tgDestinations[b.dst]
		got, err := evaluator{b.edit(pols)}.allowed(policyConn{From: tgSources[b.src], To: d.to, Proto: d.proto, Port: d.port})
		if err != nil || !got {
			t.Errorf("%s: %s → %s allowed = %v, %v; the broken set should allow it", name, b.src, b.dst, got, err)
		}
	}
}

// TestThreeGatePoliciesShape: every policy is in the namespace, governs
// only the topology's pods, states both directions, carries the ownership
// labels, and has a name of its own.
func TestThreeGatePoliciesShape(t *testing.T) {
	pols, err := ThreeGatePolicies(testInput())
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range pols {
		if names[p.Name] || !strings.HasPrefix(p.Name, "tg1-") {
			t.Errorf("policy name %q repeated or not under tg1-", p.Name)
		}
		names[p.Name] = true
		if p.Namespace != tgNamespace || p.Spec.PodSelector.MatchLabels[ThreeGateLabelTopology] != "tg1" {
			t.Errorf("%s: namespace %q, selector %v; want %s and the topology label", p.Name, p.Namespace, p.Spec.PodSelector, tgNamespace)
		}
		if len(p.Spec.PolicyTypes) != 2 {
			t.Errorf("%s: policy types %v, want Ingress and Egress", p.Name, p.Spec.PolicyTypes)
		}
		if p.Labels[ThreeGateLabelManagedBy] != engine.ManagedByValue {
			t.Errorf("%s: labels %v lack the ownership label", p.Name, p.Labels)
		}
	}
	if len(pols) == 0 || pols[0].Name != "tg1-default-deny" || len(pols[0].Spec.Ingress)+len(pols[0].Spec.Egress) != 0 {
		t.Errorf("the first policy is not a rule-less default deny: %+v", pols[0])
	}
}

func TestThreeGateLabelDomainIsEngines(t *testing.T) {
	parts := strings.Split(strings.TrimSuffix(engine.LabelPrefix, "."), ".")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	if got := strings.Join(parts, ".") + "/"; got != threegateLabelDomain {
		t.Errorf("engine.LabelPrefix %q reads as %q, the pod labels use %q", engine.LabelPrefix, got, threegateLabelDomain)
	}
}

// TestThreeGatePoliciesRefuse: inputs that cannot be enforced safely are
// errors on the field at fault, and give no policies.
func TestThreeGatePoliciesRefuse(t *testing.T) {
	cases := map[string]struct {
		edit  func(*PolicyInput)
		field string
	}{
		"bad name":             {func(in *PolicyInput) { in.Name = "TG_1" }, "name"},
		"bad namespace":        {func(in *PolicyInput) { in.Namespace = "" }, "namespace"},
		"bad proxy port":       {func(in *PolicyInput) { in.ProxyPort = -1 }, "proxy.port"},
		"bad runner port":      {func(in *PolicyInput) { in.RunnerPort = 70000 }, "runner.port"},
		"ports clash":          {func(in *PolicyInput) { in.ProxyPort, in.RunnerPort = 8080, 8080 }, "proxy.port"},
		"private dns":          {func(in *PolicyInput) { in.ProxyDNS = []netip.Addr{netip.MustParseAddr("10.96.0.10")} }, "proxy.dns"},
		"dns in service range": {func(in *PolicyInput) { in.ProxyDNS = []netip.Addr{netip.MustParseAddr("198.18.96.10")} }, "proxy.dns"},
		"reserved proxy label": {func(in *PolicyInput) { in.ProxyLabels = map[string]string{ThreeGateLabelRole: "CORE"} }, "proxy.labels"},
		"no cluster ranges":    {func(in *PolicyInput) { in.Cluster.ServiceCIDRs = nil }, "cluster"},
		"no api server":        {func(in *PolicyInput) { in.Cluster.APIServer = nil }, "cluster"},
		"api server no port": {func(in *PolicyInput) {
			in.Cluster.APIServer = []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), 0)}
		}, "cluster.api_server"},
	}
	for name, c := range cases {
		in := testInput()
		c.edit(&in)
		pols, err := ThreeGatePolicies(in)
		var pe *PolicyInputError
		if pols != nil || !errors.As(err, &pe) || !hasField(err, c.field) {
			t.Errorf("%s: %d policies, error %v; want an error on %s", name, len(pols), err, c.field)
		}
	}
}

// TestAgentLLMPolicyRefuse: an LLM endpoint that would open the cluster
// itself, or a policy that could select pods beyond the agent's runner, is
// an error on the field at fault.
func TestAgentLLMPolicyRefuse(t *testing.T) {
	type args struct {
		topo, ns, agent string
		labels          map[string]string
		llm             LLMEndpoint
		cluster         ClusterNetwork
	}
	ok := func() args {
		return args{"tg1", tgNamespace, "a1", agentLabels("a1"), LLMEndpoint{CIDRs: pfx("10.30.0.0/24"), Ports: []int{8080}}, testClusterNet()}
	}
	if _, err := AgentLLMPolicy(ok().topo, ok().ns, ok().agent, ok().labels, ok().llm, ok().cluster); err != nil {
		t.Fatalf("a valid input is refused: %v", err)
	}
	cases := map[string]struct {
		edit  func(*args)
		field string
	}{
		"bad topology":          {func(a *args) { a.topo = "TG" }, "name"},
		"bad agent":             {func(a *args) { a.agent = "a/b" }, "agent_id"},
		"no runner labels":      {func(a *args) { a.labels = nil }, "runner_labels"},
		"threegate label":       {func(a *args) { a.labels = map[string]string{ThreeGateLabelRole: "CORE"} }, "runner_labels"},
		"no llm":                {func(a *args) { a.llm.CIDRs = nil }, "llm.cidrs"},
		"llm is the internet":   {func(a *args) { a.llm.CIDRs = pfx("0.0.0.0/0") }, "llm.cidrs"},
		"llm is metadata":       {func(a *args) { a.llm.CIDRs = pfx("169.254.169.254/32") }, "llm.cidrs"},
		"llm is the api server": {func(a *args) { a.llm.CIDRs = pfx("192.0.2.10/32") }, "llm.cidrs"},
		"llm is a node":         {func(a *args) { a.llm.CIDRs = pfx("203.0.113.7/32") }, "llm.cidrs"},
		"llm host bits":         {func(a *args) { a.llm.CIDRs = pfx("10.30.0.1/24") }, "llm.cidrs"},
		"llm ipv6":              {func(a *args) { a.llm.CIDRs = pfx("fd00::/64") }, "llm.cidrs"},
		"no llm port":           {func(a *args) { a.llm.Ports = nil }, "llm.ports"},
		"bad llm port":          {func(a *args) { a.llm.Ports = []int{70000} }, "llm.ports"},
		"no cluster":            {func(a *args) { a.cluster = ClusterNetwork{} }, "cluster"},
	}
	for name, c := range cases {
		a := ok()
		c.edit(&a)
		_, err := AgentLLMPolicy(a.topo, a.ns, a.agent, a.labels, a.llm, a.cluster)
		if !hasField(err, c.field) {
			t.Errorf("%s: error %v; want an error on %s", name, err, c.field)
		}
	}
}

// TestAgentLLMPolicyNames: every agent id gives a valid policy name of its
// own, labelled with the agent.
func TestAgentLLMPolicyNames(t *testing.T) {
	seen := map[string]string{}
	for _, id := range []string{"a1", "a_b", "a-b", "A.b", strings.Repeat("x", 60), strings.Repeat("x", 61)} {
		p, err := AgentLLMPolicy("tg1", tgNamespace, id, agentLabels(id), LLMEndpoint{CIDRs: pfx("10.30.0.0/24"), Ports: []int{80}}, testClusterNet())
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if msgs := validation.IsDNS1123Subdomain(p.Name); len(msgs) > 0 || len(p.Name) > 63 {
			t.Errorf("%s: policy name %q: %v", id, p.Name, msgs)
		}
		if other, dup := seen[p.Name]; dup {
			t.Errorf("agents %q and %q share the policy name %s", id, other, p.Name)
		}
		seen[p.Name] = id
		if p.Labels[ThreeGateLabelAgent] != id || p.Labels[ThreeGateLabelTopology] != "tg1" {
			t.Errorf("%s: labels %v", id, p.Labels)
		}
	}
}

func hasField(err error, field string) bool {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			if hasField(e, field) {
				return true
			}
		}
	}
	var pe *PolicyInputError
	return errors.As(err, &pe) && pe.Field == field
}
