package kube

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	netv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testNodes() []corev1.Node {
	node := func(name string, pods []string, addrs ...corev1.NodeAddress) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDRs: pods}, Status: corev1.NodeStatus{Addresses: addrs}}
	}
	return []corev1.Node{
		node("n1", []string{"10.244.0.0/24", "fd00:10:244::/64"},
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.250.0.1"},
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.7"},
			corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n1"},
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::1"}),
		node("n2", []string{"10.244.1.0/24"}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.250.0.2"}),
	}
}

func testAPIService() *corev1.Service {
	return &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1", Ports: []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP}}}}
}

func testAPISlices() []discoveryv1.EndpointSlice {
	port, tcp := int32(6443), corev1.ProtocolTCP
	return []discoveryv1.EndpointSlice{{
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.250.0.1"}}, {Addresses: []string{"10.250.0.2"}}},
		Ports:       []discoveryv1.EndpointPort{{Port: &port, Protocol: &tcp}},
	}}
}

func TestClusterNetworkFrom(t *testing.T) {
	cidrs := []netv1.ServiceCIDR{{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: netv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16", "fd00:96::/108"}}}}
	cn, err := clusterNetworkFrom(testNodes(), cidrs, testAPIService(), testAPISlices(), "https://10.250.255.2:6443")
	if err != nil {
		t.Fatal(err)
	}
	want := ClusterNetwork{
		PodCIDRs:     pfx("10.244.0.0/24", "10.244.1.0/24"),
		ServiceCIDRs: pfx("10.96.0.0/16"),
		Nodes:        pfx("10.250.0.1/32", "10.250.0.2/32", "203.0.113.7/32"),
		APIServer: []netip.AddrPort{
			netip.MustParseAddrPort("10.96.0.1:443"), netip.MustParseAddrPort("10.250.0.1:6443"),
			netip.MustParseAddrPort("10.250.0.2:6443"), netip.MustParseAddrPort("10.250.255.2:6443"),
		},
	}
	if fmt.Sprint(cn) != fmt.Sprint(want) {
		t.Errorf("got  %+v\nwant %+v", cn, want)
	}
	// What it found is enough for the policies.
	if _, err := ThreeGatePolicies(PolicyInput{Name: "tg", Namespace: "ns", Cluster: cn}); err != nil {
		t.Errorf("the discovered network is refused: %v", err)
	}
}

// TestClusterNetworkFromOldCluster: without the ServiceCIDR API the
// kubernetes Service's address is the service range known; a kubeconfig
// host that is a name adds nothing.
func TestClusterNetworkFromOldCluster(t *testing.T) {
	cn, err := clusterNetworkFrom(testNodes(), nil, testAPIService(), testAPISlices(), "https://api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(cn.ServiceCIDRs) != "[10.96.0.1/32]" || len(cn.APIServer) != 3 {
		t.Errorf("service CIDRs %v, API server %v; want the Service's /32 and three address:port pairs", cn.ServiceCIDRs, cn.APIServer)
	}
}

func TestClusterNetworkFromMissing(t *testing.T) {
	noPods := testNodes()
	for i := range noPods {
		noPods[i].Spec.PodCIDRs = nil
	}
	for name, c := range map[string]struct {
		nodes []corev1.Node
		svc   *corev1.Service
		want  string
	}{
		"no pod CIDRs":   {noPods, testAPIService(), "spec.podCIDRs"},
		"no nodes":       {nil, testAPIService(), "pod range is unknown"},
		"no api address": {testNodes(), &corev1.Service{}, "service range"},
	} {
		slices := testAPISlices()
		if c.svc.Spec.ClusterIP == "" {
			slices = nil
		}
		_, err := clusterNetworkFrom(c.nodes, nil, c.svc, slices, "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v; want one that mentions %q", name, err, c.want)
		}
	}
}

func TestRestAddrPort(t *testing.T) {
	for host, want := range map[string]string{
		"https://10.250.255.2:6443": "10.250.255.2:6443",
		"https://10.0.0.1":          "10.0.0.1:443",
		"http://10.0.0.1":           "10.0.0.1:80",
		"10.0.0.1:6443":             "10.0.0.1:6443",
		"https://kube.example:6443": "",
		"https://[fd00::1]:6443":    "",
		"":                          "",
	} {
		ap, ok := restAddrPort(host)
		got := ""
		if ok {
			got = ap.String()
		}
		if got != want {
			t.Errorf("restAddrPort(%q) = %q, want %q", host, got, want)
		}
	}
}
