package kube

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A ThreeGate execution pod has no resolver; an agent's own pods (network
// "none" or "bridge") keep the cluster's default.
func TestHardenedPodMemberDNS(t *testing.T) {
	base := PodSpec{AgentID: "a", Image: "img", WorkspaceClaim: "ws"}
	member := base
	member.Topology, member.Role = "tg", "CORE"
	p, err := HardenedPod(member, "ns", "m")
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.DNSPolicy != corev1.DNSNone || p.Spec.DNSConfig == nil || len(p.Spec.DNSConfig.Nameservers) != 1 ||
		p.Spec.DNSConfig.Nameservers[0] != MemberDNSSink || len(p.Spec.DNSConfig.Searches) != 0 {
		t.Errorf("member pod DNS: %q %+v", p.Spec.DNSPolicy, p.Spec.DNSConfig)
	}
	p, err = HardenedPod(base, "ns", "m")
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.DNSPolicy != "" || p.Spec.DNSConfig != nil {
		t.Errorf("non-member pod DNS: %q %+v", p.Spec.DNSPolicy, p.Spec.DNSConfig)
	}
}

func TestMemberHostAliases(t *testing.T) {
	cidrs := []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("192.0.2.8/32")}
	got := MemberHostAliases("api.example", cidrs)
	if len(got) != 2 || got[0].IP != "192.0.2.7" || got[1].Hostnames[0] != "api.example" {
		t.Errorf("aliases %+v", got)
	}
	if got := MemberHostAliases("192.0.2.7", cidrs); got != nil {
		t.Errorf("an address got aliases %+v", got)
	}
	if got := MemberHostAliases("", cidrs); got != nil {
		t.Errorf("no host got aliases %+v", got)
	}
}
