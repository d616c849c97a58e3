package kube

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MemberDNSSink is the only nameserver a ThreeGate member's resolv.conf
// names: the pod's own loopback, where nothing of the product listens. A
// query the member's resolver sends there never leaves the pod's network
// namespace, so it reaches no cluster DNS and nothing behind it, whatever
// the cluster's CNI enforces and before its policies cover a new pod.
//
// The cluster's DNS (kube-dns, CoreDNS) forwards every name it does not
// own to its upstream: a member that could ask it could tunnel data out in
// the names it looks up. The topology's policies give members no egress
// to port 53 of anything (only the proxy may ask its own resolvers); this
// keeps the cluster's DNS out of the member's resolv.conf too. Members
// need no name: the proxy, an asked runner and the API server are reached
// by address, and a runner's model endpoint by the hostAliases its pod
// gets (MemberHostAliases), decided at apply with its network policy.
const MemberDNSSink = "127.0.0.1"

// MemberDNS takes the cluster's DNS away from a ThreeGate member's pod:
// dnsPolicy None, and a dnsConfig with MemberDNSSink as the one nameserver
// and no search domain. Every pod that wears a topology's member labels
// (runner, execution and verification pods) is made with it. An agent
// outside a topology with container_mode.network = "bridge" keeps the
// cluster's DNS by design: it may reach public addresses, as a bridge
// container resolves through the engine on Docker.
func MemberDNS(spec *corev1.PodSpec) {
	spec.DNSPolicy = corev1.DNSNone
	spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{MemberDNSSink}}
}

// MemberHostAliases are the /etc/hosts entries a member needs instead of
// DNS: host (a model endpoint's name) at each of addrs. None when host is
// empty or an IP address.
func MemberHostAliases(host string, addrs []netip.Prefix) []corev1.HostAlias {
	if host == "" || len(addrs) == 0 {
		return nil
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	var out []corev1.HostAlias
	for _, p := range addrs {
		if p.IsSingleIP() {
			out = append(out, corev1.HostAlias{IP: p.Addr().String(), Hostnames: []string{host}})
		}
	}
	return out
}

// The cluster's DNS Service, by the name kube-dns and CoreDNS both use.
const dnsServiceName = "kube-dns"

// ClusterDNS is the address of the cluster's DNS Service (kube-system's
// kube-dns), and false when the cluster has none or the caller may not
// read it.
func ClusterDNS(ctx context.Context, c *Client) (netip.Addr, bool, error) {
	svc, err := c.Clientset.CoreV1().Services(dnsNamespace).Get(ctx, dnsServiceName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
		return netip.Addr{}, false, nil
	case err != nil:
		return netip.Addr{}, false, fmt.Errorf("the cluster's DNS Service %s/%s: %w", dnsNamespace, dnsServiceName, err)
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil || !ip.Is4() {
		return netip.Addr{}, false, nil
	}
	return ip, true, nil
}
