package kube

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
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
		LLM:         LLMEndpoint{CIDRs: pfx("10.30.0.0/24", "10.250.0.0/16"), Ports: []int{8080}},
		ProxyLabels: map[string]string{"app": "egress-proxy"},
		Cluster: ClusterNetwork{
			PodCIDRs:     pfx("10.244.0.0/16"),
			ServiceCIDRs: pfx("198.18.96.0/24"),
			Nodes:        pfx("10.250.0.1/32", "203.0.113.7/32"),
			APIServer:    []netip.Addr{netip.MustParseAddr("10.250.0.1"), netip.MustParseAddr("198.18.96.1"), netip.MustParseAddr("192.0.2.10")},
		},
	}
}

func tgPod(ip string, l map[string]string) policyEndpoint {
	return policyEndpoint{Namespace: tgNamespace, Labels: l, IP: netip.MustParseAddr(ip)}
}

func tgMember(ip, role string, execution bool) policyEndpoint {
	return tgPod(ip, ThreeGateMemberLabels("tg1", role, execution))
}

func tgProxyPod(ip, topo string, extra map[string]string) policyEndpoint {
	l := ThreeGateMemberLabels(topo, topology.RoleProxy, false)
	for k, v := range extra {
		l[k] = v
	}
	return tgPod(ip, l)
}

var (
	tgSources = map[string]policyEndpoint{
		"core":           tgMember("10.244.0.10", topology.RoleCore, false),
		"core-exec":      tgMember("10.244.0.11", topology.RoleCore, true),
		"fetch":          tgMember("10.244.0.12", topology.RoleFetch, false),
		"fetch-exec":     tgMember("10.244.0.13", topology.RoleFetch, true),
		"tool-exec":      tgMember("10.244.0.14", topology.RoleToolExec, false),
		"tool-exec-exec": tgMember("10.244.0.15", topology.RoleToolExec, true),
		"proxy":          tgProxyPod("10.244.0.9", "tg1", map[string]string{"app": "egress-proxy"}),
		"non-member":     tgPod("10.244.0.30", map[string]string{"app": "other"}),
	}
	extAddr  = func(ip string) policyEndpoint { return policyEndpoint{IP: netip.MustParseAddr(ip)} }
	protoTCP = corev1.ProtocolTCP
	protoUDP = corev1.ProtocolUDP
	// tgDestinations: name -> where, protocol, port.
	tgDestinations = map[string]struct {
		to    policyEndpoint
		proto corev1.Protocol
		port  int
	}{
		"llm":                  {extAddr("10.30.0.5"), protoTCP, 8080},
		"llm-other-port":       {extAddr("10.30.0.5"), protoTCP, 22},
		"llm-udp":              {extAddr("10.30.0.5"), protoUDP, 8080},
		"llm-range-2":          {extAddr("10.250.3.4"), protoTCP, 8080},
		"node-in-llm-range":    {extAddr("10.250.0.1"), protoTCP, 8080},
		"proxy":                {tgSources["proxy"], protoTCP, 3128},
		"proxy-other-port":     {tgSources["proxy"], protoTCP, 22},
		"proxy-udp":            {tgSources["proxy"], protoUDP, 3128},
		"unlabelled-proxy":     {tgProxyPod("10.244.0.21", "tg1", nil), protoTCP, 3128},
		"other-topology-proxy": {tgProxyPod("10.244.0.20", "tg2", map[string]string{"app": "egress-proxy"}), protoTCP, 3128},
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
		"node-public":          {extAddr("203.0.113.7"), protoTCP, 443},
		"node-kubelet":         {extAddr("10.250.0.1"), protoTCP, 10250},
		"apiserver":            {extAddr("192.0.2.10"), protoTCP, 443},
		"apiserver-node":       {extAddr("10.250.0.1"), protoTCP, 6443},
		"apiserver-service":    {extAddr("198.18.96.1"), protoTCP, 443},
		"kube-dns":             {extAddr("198.18.96.10"), protoUDP, 53},
		"pod-by-address":       {extAddr("10.244.0.99"), protoTCP, 443},
		"member-core":          {tgSources["core"], protoTCP, 8080},
		"member-tool-exec":     {tgSources["tool-exec"], protoTCP, 8080},
		"non-member":           {tgSources["non-member"], protoTCP, 80},
	}
)

// TestThreeGateConnectivity is the specification's connectivity table,
// checked row by row against the generated policies: every source ×
// destination pair not listed as allowed must be denied.
func TestThreeGateConnectivity(t *testing.T) {
	pols, err := ThreeGatePolicies(testInput())
	if err != nil {
		t.Fatal(err)
	}
	llm := []string{"llm", "llm-range-2"}
	allowed := map[string][]string{
		"core":           llm,
		"core-exec":      llm,
		"fetch":          append([]string{"proxy"}, llm...),
		"fetch-exec":     append([]string{"proxy"}, llm...),
		"tool-exec":      llm,
		"tool-exec-exec": nil,
		"proxy":          {"web-443", "dns-udp", "dns-tcp"},
	}
	// A pod outside the topology is not governed by its policies: it
	// reaches everything but the members, which admit only FETCH (and only
	// at the proxy), and the other topology's proxy, which has no policies
	// in this set.
	for d := range tgDestinations {
		switch d {
		case "proxy", "proxy-other-port", "proxy-udp", "unlabelled-proxy", "member-core", "member-tool-exec":
		default:
			allowed["non-member"] = append(allowed["non-member"], d)
		}
	}
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
	breakages := map[string]struct {
		edit func([]netv1.NetworkPolicy) []netv1.NetworkPolicy
		src  string
		dst  string
	}{
		"no policies": {func([]netv1.NetworkPolicy) []netv1.NetworkPolicy { return nil }, "core", "web-443"},
		"no default deny": {func(p []netv1.NetworkPolicy) []netv1.NetworkPolicy {
			return p[1:]
		}, "tool-exec-exec", "web-80"},
		"proxy without excepts": {func(p []netv1.NetworkPolicy) []netv1.NetworkPolicy {
			for i := range p {
				for _, r := range p[i].Spec.Egress {
					for _, peer := range r.To {
						if peer.IPBlock != nil {
							peer.IPBlock.Except = nil
						}
					}
				}
			}
			return p
		}, "proxy", "metadata-443"},
		"llm on every port": {func(p []netv1.NetworkPolicy) []netv1.NetworkPolicy {
			p[1].Spec.Egress[0].Ports = nil
			return p
		}, "core", "llm-other-port"},
		"tool-exec execution pods as runners": {func(p []netv1.NetworkPolicy) []netv1.NetworkPolicy {
			p[2].Spec.PodSelector.MatchExpressions = nil
			return p
		}, "tool-exec-exec", "llm"},
	}
	for name, b := range breakages {
		pols, err := ThreeGatePolicies(testInput())
		if err != nil {
			t.Fatal(err)
		}
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
		if p.Labels[threegateLabelDomain+"managed-by"] != engine.ManagedByValue {
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
		"bad name":              {func(in *PolicyInput) { in.Name = "TG_1" }, "name"},
		"bad namespace":         {func(in *PolicyInput) { in.Namespace = "" }, "namespace"},
		"no llm":                {func(in *PolicyInput) { in.LLM.CIDRs = nil }, "llm.cidrs"},
		"llm is the internet":   {func(in *PolicyInput) { in.LLM.CIDRs = pfx("0.0.0.0/0") }, "llm.cidrs"},
		"llm is metadata":       {func(in *PolicyInput) { in.LLM.CIDRs = pfx("169.254.169.254/32") }, "llm.cidrs"},
		"llm is the api server": {func(in *PolicyInput) { in.LLM.CIDRs = pfx("192.0.2.10/32") }, "llm.cidrs"},
		"llm is a node":         {func(in *PolicyInput) { in.LLM.CIDRs = pfx("203.0.113.7/32") }, "llm.cidrs"},
		"llm host bits":         {func(in *PolicyInput) { in.LLM.CIDRs = pfx("10.30.0.1/24") }, "llm.cidrs"},
		"llm ipv6":              {func(in *PolicyInput) { in.LLM.CIDRs = pfx("fd00::/64") }, "llm.cidrs"},
		"no llm port":           {func(in *PolicyInput) { in.LLM.Ports = nil }, "llm.ports"},
		"bad llm port":          {func(in *PolicyInput) { in.LLM.Ports = []int{70000} }, "llm.ports"},
		"bad proxy port":        {func(in *PolicyInput) { in.ProxyPort = -1 }, "proxy.port"},
		"private dns":           {func(in *PolicyInput) { in.ProxyDNS = []netip.Addr{netip.MustParseAddr("10.96.0.10")} }, "proxy.dns"},
		"dns in service range":  {func(in *PolicyInput) { in.ProxyDNS = []netip.Addr{netip.MustParseAddr("198.18.96.10")} }, "proxy.dns"},
		"reserved proxy label":  {func(in *PolicyInput) { in.ProxyLabels = map[string]string{ThreeGateLabelRole: "CORE"} }, "proxy.labels"},
		"no cluster ranges":     {func(in *PolicyInput) { in.Cluster.ServiceCIDRs = nil }, "cluster"},
		"no api server":         {func(in *PolicyInput) { in.Cluster.APIServer = nil }, "cluster"},
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
