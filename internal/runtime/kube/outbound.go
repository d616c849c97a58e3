package kube

import (
	"errors"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The cluster's DNS, as kube-dns and CoreDNS label their pods.
const (
	dnsNamespace = "kube-system"
	dnsAppLabel  = "k8s-app"
	dnsAppValue  = "kube-dns"
)

// OutboundEgress is what network = "bridge" means for a message pod, as
// the managed bridge means it on Docker: out to public addresses on any
// port, and nothing of the machine it runs on: not the cluster's pods,
// services, nodes or API server, not private, link-local (the metadata
// service), loopback, multicast or reserved space. Names resolve through
// the cluster's DNS pods (UDP and TCP 53 only), as a bridge container's do
// through the engine's resolver.
func OutboundEgress(cluster ClusterNetwork) ([]netv1.NetworkPolicyEgressRule, error) {
	var ps problems
	sets := cluster.sets(&ps)
	if err := errors.Join(ps...); err != nil {
		return nil, err
	}
	udp, tcp53 := corev1.ProtocolUDP, corev1.ProtocolTCP
	port53 := intstr.FromInt32(53)
	dns := netv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: dnsNamespace}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{dnsAppLabel: dnsAppValue}},
	}
	return []netv1.NetworkPolicyEgressRule{
		{To: []netv1.NetworkPolicyPeer{ipBlock(netip.MustParsePrefix("0.0.0.0/0"), sets.private)}},
		{To: []netv1.NetworkPolicyPeer{dns}, Ports: []netv1.NetworkPolicyPort{{Protocol: &udp, Port: &port53}, {Protocol: &tcp53, Port: &port53}}},
	}, nil
}
