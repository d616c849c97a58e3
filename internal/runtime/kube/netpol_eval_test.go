package kube

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// This file is a small NetworkPolicy evaluator, after the semantics of the
// Kubernetes API documentation: a pod is isolated in a direction when any
// policy in its namespace selects it with that policy type, and then only
// what some rule of those policies allows passes; a connection between two
// pods needs the source's egress and the destination's ingress. Where an
// implementation may differ it takes the permissive reading (an ipBlock
// matches pod addresses too), so a denial it reports holds everywhere.

// policyEndpoint is a pod (Labels non-nil) or an address outside the cluster's
// pods.
type policyEndpoint struct {
	Namespace string
	Labels    map[string]string
	IP        netip.Addr
}

func (e policyEndpoint) isPod() bool { return e.Labels != nil }

// policyConn is one connection attempt.
type policyConn struct {
	From, To policyEndpoint
	Proto    corev1.Protocol
	Port     int
}

type evaluator struct{ pols []netv1.NetworkPolicy }

// allowed says whether c passes; err reports a policy construct the
// evaluator does not know, which the generated policies must not use.
func (ev evaluator) allowed(c policyConn) (bool, error) {
	out, err := ev.direction(c.From, netv1.PolicyTypeEgress, func(p netv1.NetworkPolicy) (bool, error) {
		for _, r := range p.Spec.Egress {
			if ok, err := ev.rule(p.Namespace, r.To, r.Ports, c.To, c); ok || err != nil {
				return ok, err
			}
		}
		return false, nil
	})
	if err != nil || !out || !c.To.isPod() {
		return out, err
	}
	return ev.direction(c.To, netv1.PolicyTypeIngress, func(p netv1.NetworkPolicy) (bool, error) {
		for _, r := range p.Spec.Ingress {
			if ok, err := ev.rule(p.Namespace, r.From, r.Ports, c.From, c); ok || err != nil {
				return ok, err
			}
		}
		return false, nil
	})
}

// direction: pod is open unless a policy of type t selects it; then one
// of those policies must allow.
func (ev evaluator) direction(pod policyEndpoint, t netv1.PolicyType, allows func(netv1.NetworkPolicy) (bool, error)) (bool, error) {
	isolated := false
	for _, p := range ev.pols {
		if p.Namespace != pod.Namespace || !hasType(p, t) {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil {
			return false, err
		}
		if !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		isolated = true
		if ok, err := allows(p); ok || err != nil {
			return ok, err
		}
	}
	return !isolated, nil
}

func hasType(p netv1.NetworkPolicy, t netv1.PolicyType) bool {
	for _, pt := range p.Spec.PolicyTypes {
		if pt == t {
			return true
		}
	}
	// Without policyTypes, Ingress always, Egress when there are rules.
	return len(p.Spec.PolicyTypes) == 0 && (t == netv1.PolicyTypeIngress || len(p.Spec.Egress) > 0)
}

// rule: no peers means every peer, no ports every port.
func (ev evaluator) rule(policyNS string, peers []netv1.NetworkPolicyPeer, ports []netv1.NetworkPolicyPort, peer policyEndpoint, c policyConn) (bool, error) {
	if !portMatches(ports, c) {
		return false, nil
	}
	if len(peers) == 0 {
		return true, nil
	}
	for _, p := range peers {
		ok, err := peerMatches(policyNS, p, peer)
		if ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

func peerMatches(policyNS string, p netv1.NetworkPolicyPeer, e policyEndpoint) (bool, error) {
	switch {
	case p.NamespaceSelector != nil:
		return false, fmt.Errorf("namespaceSelector is not evaluated")
	case p.IPBlock != nil && (p.PodSelector != nil):
		return false, fmt.Errorf("a peer with both ipBlock and podSelector is invalid")
	case p.IPBlock != nil:
		cidr, err := netip.ParsePrefix(p.IPBlock.CIDR)
		if err != nil || !cidr.Contains(e.IP) {
			return false, err
		}
		for _, ex := range p.IPBlock.Except {
			x, err := netip.ParsePrefix(ex)
			if err != nil {
				return false, err
			}
			if x.Bits() <= cidr.Bits() || !cidr.Contains(x.Addr()) {
				return false, fmt.Errorf("except %s is not strictly inside %s", x, cidr)
			}
			if x.Contains(e.IP) {
				return false, nil
			}
		}
		return true, nil
	case p.PodSelector != nil:
		if !e.isPod() || e.Namespace != policyNS {
			return false, nil
		}
		sel, err := metav1.LabelSelectorAsSelector(p.PodSelector)
		return err == nil && sel.Matches(labels.Set(e.Labels)), err
	}
	return false, fmt.Errorf("empty peer")
}

func portMatches(ports []netv1.NetworkPolicyPort, c policyConn) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if proto != c.Proto {
			continue
		}
		if p.Port == nil {
			return true
		}
		lo, hi := p.Port.IntValue(), p.Port.IntValue()
		if p.EndPort != nil {
			hi = int(*p.EndPort)
		}
		if lo == 0 { // a named port: the generated policies use none
			continue
		}
		if c.Port >= lo && c.Port <= hi {
			return true
		}
	}
	return false
}
