package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	netv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// apiServiceName is the Service every cluster has for its API server, in
// the default namespace.
const apiServiceName = "kubernetes"

// DiscoverCluster reads the addresses a ThreeGate policy set must keep
// apart from the members: the nodes' pod CIDRs and addresses, the service
// CIDRs and every address:port the API server answers on. It needs read
// access to nodes, ServiceCIDRs, and the kubernetes Service and its
// EndpointSlices in "default". IPv6 entries are left out: the policies are
// IPv4 only.
func DiscoverCluster(ctx context.Context, c *Client) (ClusterNetwork, error) {
	cs := c.Clientset
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ClusterNetwork{}, fmt.Errorf("discover cluster: list nodes (the provider's identity needs list on nodes): %w", err)
	}
	svc, err := cs.CoreV1().Services(DefaultNamespace).Get(ctx, apiServiceName, metav1.GetOptions{})
	if err != nil {
		return ClusterNetwork{}, fmt.Errorf("discover cluster: the %s Service in %s: %w", apiServiceName, DefaultNamespace, err)
	}
	slices, err := cs.DiscoveryV1().EndpointSlices(DefaultNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + apiServiceName,
	})
	if err != nil {
		return ClusterNetwork{}, fmt.Errorf("discover cluster: the %s EndpointSlices: %w", apiServiceName, err)
	}
	var cidrs []netv1.ServiceCIDR
	list, err := cs.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		cidrs = list.Items
	case apierrors.IsNotFound(err):
		// Clusters before 1.33 have no ServiceCIDR API: fall back to the
		// kubernetes Service's own address (clusterNetworkFrom does).
	default:
		return ClusterNetwork{}, fmt.Errorf("discover cluster: list ServiceCIDRs: %w", err)
	}
	host := ""
	if c.REST != nil {
		host = c.REST.Host
	}
	return clusterNetworkFrom(nodes.Items, cidrs, svc, slices.Items, host)
}

// clusterNetworkFrom is DiscoverCluster without the API calls. Without
// ServiceCIDRs (an older cluster) the kubernetes Service's address is the
// only service address known. restHost is the API
// server as the caller's kubeconfig names it; when it is an IP literal it
// is one of the API server's addresses too (the project's test cluster
// serves the API on an address no Kubernetes object names).
func clusterNetworkFrom(nodes []corev1.Node, cidrs []netv1.ServiceCIDR, svc *corev1.Service, slices []discoveryv1.EndpointSlice, restHost string) (ClusterNetwork, error) {
	var cn ClusterNetwork
	var errs []error
	for _, n := range nodes {
		pods := n.Spec.PodCIDRs
		if len(pods) == 0 && n.Spec.PodCIDR != "" {
			pods = []string{n.Spec.PodCIDR}
		}
		for _, s := range pods {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("node %s: pod CIDR %q: %w", n.Name, s, err))
				continue
			}
			if p.Addr().Is4() {
				cn.PodCIDRs = append(cn.PodCIDRs, p.Masked())
			}
		}
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
				cn.Nodes = append(cn.Nodes, netip.PrefixFrom(ip, 32))
			}
		}
	}
	for _, sc := range cidrs {
		for _, s := range sc.Spec.CIDRs {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("ServiceCIDR %s: %q: %w", sc.Name, s, err))
				continue
			}
			if p.Addr().Is4() {
				cn.ServiceCIDRs = append(cn.ServiceCIDRs, p.Masked())
			}
		}
	}
	var api []netip.AddrPort
	if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil && ip.Is4() {
		if len(cn.ServiceCIDRs) == 0 {
			cn.ServiceCIDRs = append(cn.ServiceCIDRs, netip.PrefixFrom(ip, 32))
		}
		for _, p := range svc.Spec.Ports {
			if p.Protocol == corev1.ProtocolTCP || p.Protocol == "" {
				api = append(api, netip.AddrPortFrom(ip, uint16(p.Port)))
			}
		}
	}
	for _, es := range slices {
		if es.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, ep := range es.Endpoints {
			for _, a := range ep.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				for _, p := range es.Ports {
					if p.Port != nil && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
						api = append(api, netip.AddrPortFrom(ip, uint16(*p.Port)))
					}
				}
			}
		}
	}
	if ap, ok := restAddrPort(restHost); ok {
		api = append(api, ap)
	}
	cn.APIServer = uniqueAddrPorts(api)
	cn.PodCIDRs, cn.ServiceCIDRs, cn.Nodes = minimal(cn.PodCIDRs), minimal(cn.ServiceCIDRs), minimal(cn.Nodes)
	switch {
	case len(cn.PodCIDRs) == 0:
		errs = append(errs, errors.New("no node has an IPv4 spec.podCIDRs: the pod range is unknown, so the policies cannot keep members off it (does the controller-manager allocate node CIDRs?)"))
	case len(cn.Nodes) == 0:
		errs = append(errs, errors.New("no node has an IPv4 InternalIP or ExternalIP address"))
	case len(cn.ServiceCIDRs) == 0:
		errs = append(errs, errors.New("no IPv4 service range: neither a ServiceCIDR nor the kubernetes Service's address names one"))
	case len(cn.APIServer) == 0:
		errs = append(errs, errors.New("no IPv4 address of the API server: the kubernetes Service and its EndpointSlices name none"))
	}
	if err := errors.Join(errs...); err != nil {
		return ClusterNetwork{}, fmt.Errorf("discover cluster: %w", err)
	}
	return cn, nil
}

// restAddrPort is the API server's address from a rest.Config Host
// ("https://10.0.0.1:6443", "10.0.0.1", ...) when it is an IPv4 literal.
func restAddrPort(host string) (netip.AddrPort, bool) {
	if host == "" {
		return netip.AddrPort{}, false
	}
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		u, err = url.Parse("https://" + host)
		if err != nil {
			return netip.AddrPort{}, false
		}
	}
	h, port := u.Hostname(), u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	ap, err := netip.ParseAddrPort(net.JoinHostPort(h, port))
	if err != nil || !ap.Addr().Is4() {
		return netip.AddrPort{}, false
	}
	return ap, true
}

func uniqueAddrPorts(in []netip.AddrPort) []netip.AddrPort {
	sort.Slice(in, func(i, j int) bool { return in[i].Compare(in[j]) < 0 })
	var out []netip.AddrPort
	for _, a := range in {
		if len(out) == 0 || out[len(out)-1] != a {
			out = append(out, a)
		}
	}
	return out
}
