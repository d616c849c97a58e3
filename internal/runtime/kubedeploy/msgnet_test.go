package kubedeploy

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	netv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// seedCluster gives a fake clientset what kube.DiscoverCluster reads: a
// node with its pod range and address, the kubernetes Service and its
// endpoints, and the service range.
func seedCluster(t *testing.T, cs *fake.Clientset) {
	t.Helper()
	ctx := context.Background()
	port := int32(6443)
	objs := []error{
		create(cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Spec:   corev1.NodeSpec{PodCIDR: "10.244.0.0/24", PodCIDRs: []string{"10.244.0.0/24"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.250.255.2"}}}}, metav1.CreateOptions{})),
		create(cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1", Ports: []corev1.ServicePort{{Port: 443}}}}, metav1.CreateOptions{})),
		create(cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.250.255.2"}}},
			Ports:       []discoveryv1.EndpointPort{{Port: &port}},
		}, metav1.CreateOptions{})),
		create(cs.NetworkingV1().ServiceCIDRs().Create(ctx, &netv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
			Spec: netv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16"}}}, metav1.CreateOptions{})),
	}
	for _, err := range objs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func create[T any](_ T, err error) error { return err }

// The message policy selects every message pod of its agent (with a
// message or prestarted) and nothing else: not the agent's runner pod, not
// another agent's pods. "none" has both policy types and no rule;
// "bridge" lets nothing in and only public addresses and the cluster's DNS
// out: none of the cluster's own ranges, no private or link-local space.
func TestMessagePolicy(t *testing.T) {
	cluster := kube.ClusterNetwork{
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
		Nodes: []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32")}, APIServer: []netip.AddrPort{netip.MustParseAddrPort("203.0.113.8:6443")},
	}
	none, err := MessagePolicy(NamesFor("a1"), "agents", "a1", "none", cluster)
	if err != nil {
		t.Fatal(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&none.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	podOf := func(id, msg string) labels.Set {
		t.Helper()
		p, err := kube.HardenedPod(kube.PodSpec{AgentID: id, Image: "img", WorkspaceClaim: "ws"}, "agents", msg)
		if err != nil {
			t.Fatal(err)
		}
		return p.Labels
	}
	dep, err := RunnerDeployment(NamesFor("a1"), "agents", RunnerPod{AgentID: "a1", Image: "img", Port: DefaultPort})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		labels labels.Set
		want   bool
	}{
		"message pod":          {podOf("a1", "m1"), true},
		"prestarted pod":       {podOf("a1", ""), true},
		"runner pod":           {dep.Spec.Template.Labels, false},
		"other agent's pod":    {podOf("a2", "m1"), false},
		"other agent's a1-ish": {podOf("a1-x", "m1"), false},
	} {
		if got := sel.Matches(tc.labels); got != tc.want {
			t.Errorf("%s %v: selected %v, want %v", name, tc.labels, got, tc.want)
		}
	}
	both := []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress}
	if !slices.Equal(none.Spec.PolicyTypes, both) || len(none.Spec.Ingress) != 0 || len(none.Spec.Egress) != 0 {
		t.Errorf("none: %+v, want both types and no rule", none.Spec)
	}
	if none.Labels[LabelMessagePolicy] != "a1" || none.Namespace != "agents" {
		t.Errorf("policy meta %+v", none.ObjectMeta)
	}

	bridge, err := MessagePolicy(NamesFor("a1"), "agents", "a1", "bridge", cluster)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(bridge.Spec.PolicyTypes, both) || len(bridge.Spec.Ingress) != 0 || len(bridge.Spec.Egress) != 2 {
		t.Fatalf("bridge: %+v", bridge.Spec)
	}
	out := bridge.Spec.Egress[0].To[0].IPBlock
	if out == nil || out.CIDR != "0.0.0.0/0" || len(bridge.Spec.Egress[0].Ports) != 0 {
		t.Fatalf("bridge egress %+v", bridge.Spec.Egress[0])
	}
	for _, cut := range []string{"10.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "203.0.113.7/32", "203.0.113.8/32"} {
		if !slices.Contains(out.Except, cut) {
			t.Errorf("bridge egress does not cut out %s: %v", cut, out.Except)
		}
	}
	if dns := bridge.Spec.Egress[1]; len(dns.Ports) != 2 || dns.To[0].PodSelector == nil || dns.To[0].IPBlock != nil {
		t.Errorf("bridge DNS rule %+v", dns)
	}
	if _, err := MessagePolicy(NamesFor("a1"), "agents", "a1", "my-docker-net", cluster); err == nil {
		t.Error("a Docker network name was taken")
	}
	if _, err := MessagePolicy(NamesFor("a1"), "agents", "a1", "bridge", kube.ClusterNetwork{}); err == nil {
		t.Error("bridge without the cluster's addresses was taken")
	}
}

// An agent's message policy is made by apply, read back as missing or
// changed when deleted or edited, restored by the next apply, follows a
// switch from "none" to "bridge", and is removed with the agent; a
// topology member gets none.
func TestMessagePolicyLifecycle(t *testing.T) {
	svc, cs := fakeService()
	seedCluster(t, cs)
	ctx := context.Background()
	np := cs.NetworkingV1().NetworkPolicies("agents")
	a := testAgent("quiet", "img", "")
	a.Config.Container.Network = "none"
	name := NamesFor("quiet").Base + "-messages"
	read := func() Observed {
		t.Helper()
		var o Observed
		if err := svc.readMessagePolicy(ctx, &a.Config, &o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	if o := read(); !slices.Equal(o.Missing, []string{"NetworkPolicy"}) {
		t.Errorf("before apply: %+v", o)
	}
	if err := svc.applyMessagePolicy(ctx, a); err != nil {
		t.Fatal(err)
	}
	if o := read(); len(o.Missing)+len(o.Changed) != 0 {
		t.Errorf("after apply: %+v", o)
	}
	live, err := np.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	live.Spec.Egress = []netv1.NetworkPolicyEgressRule{{}}
	if _, err := np.Update(ctx, live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if o := read(); !slices.Equal(o.Changed, []string{"NetworkPolicy"}) {
		t.Errorf("after an allow-all egress rule was added: %+v", o)
	}
	if err := svc.applyMessagePolicy(ctx, a); err != nil {
		t.Fatal(err)
	}
	if o := read(); len(o.Changed) != 0 {
		t.Errorf("after a second apply: %+v", o)
	}
	// "none" to "bridge": the same policy now lets public addresses out.
	a.Config.Container.Network = "bridge"
	if o := read(); !slices.Equal(o.Changed, []string{"NetworkPolicy"}) {
		t.Errorf("after the switch to bridge, before apply: %+v", o)
	}
	if err := svc.applyMessagePolicy(ctx, a); err != nil {
		t.Fatal(err)
	}
	if live, err := np.Get(ctx, name, metav1.GetOptions{}); err != nil || len(live.Spec.Egress) != 2 {
		t.Errorf("bridge policy: %+v %v", live, err)
	}
	if err := svc.Remove(ctx, "quiet", false); err != nil {
		t.Fatal(err)
	}
	if _, err := np.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("policy after Remove: %v", err)
	}
	// A role's network is its topology's: no policy of its own.
	c := testAgent("member", "img", "")
	c.Config.Container.Network, c.Config.Role = "", "tool_exec"
	if err := svc.applyMessagePolicy(ctx, c); err != nil {
		t.Fatal(err)
	}
	if list, _ := np.List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("a topology member got a message policy: %v", list.Items)
	}
}

// soul, memory and manage_soul pass Check, go into the runner's config as
// its seed (so a new soul is a new config hash), come back with Import,
// and read as configured (the claim is not read).
func TestBackendSeed(t *testing.T) {
	svc, cs := fakeService()
	b := NewBackend(svc)
	ctx := context.Background()
	a := agentspec.Agent{Config: testAgent("seeded", "img", "").Config,
		Meta: agentspec.Meta{Soul: "You are brief.", Memory: "Nothing yet.", ManageSoul: true, ForceDestroyWorkspace: true}}
	a.Config.Container.Network = "none"
	a.Config.Token = "tok"
	if errs := Check(a); errs != nil {
		t.Fatalf("Check: %v", errs)
	}
	k := b.agentOf(a)
	if s := k.Config.Kubernetes.Seed; s == nil || s.Soul != "You are brief." || s.Memory != "Nothing yet." || !s.ManageSoul {
		t.Fatalf("seed in the config: %+v", s)
	}
	if a.Config.Kubernetes != nil {
		t.Error("agentOf changed its argument's config")
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	hash := func(a agentspec.Agent) string {
		t.Helper()
		k := b.agentOf(a)
		if err := svc.complete(ctx, &k); err != nil {
			t.Fatal(err)
		}
		return svc.hash(k, key)
	}
	other := a
	other.Meta.Soul = "You are verbose."
	if hash(a) == hash(other) {
		t.Error("a new soul left the config hash as it was")
	}
	if err := svc.complete(ctx, &k); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(k.Config)
	n := NamesFor("seeded")
	if _, err := cs.CoreV1().Secrets("agents").Create(ctx, ConfigSecret(n, "agents", "seeded", raw, []byte("k")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	imp, err := b.Import(ctx, "seeded")
	if err != nil {
		t.Fatal(err)
	}
	if m := imp.Agent.Meta; m.Soul != a.Meta.Soul || m.Memory != a.Meta.Memory || !m.ManageSoul {
		t.Errorf("imported meta %+v", m)
	}
	if imp.Agent.Config.Kubernetes != nil || imp.Agent.Config.Container.Network != "none" {
		t.Errorf("imported config %+v", imp.Agent.Config)
	}
	o, err := b.Read(ctx, a)
	if err != nil || o.Soul != a.Meta.Soul || !o.SoulPresent {
		t.Errorf("Read: soul %q present %v, %v", o.Soul, o.SoulPresent, err)
	}
}

// A cluster's agent under gVisor on the bridge gets none of Docker's
// warnings: the embedded DNS server that gVisor cannot reach is Docker's.
func TestCheckGivesNoDockerWarning(t *testing.T) {
	svc, _ := fakeService()
	a := agentspec.Agent{Config: testAgent("runsc-bridge", "img", "").Config}
	a.Config.Container.Runtime, a.Config.Container.Network = "runsc", "bridge"
	if ws, err := NewBackend(svc).Check(a); err != nil || len(ws) != 0 {
		t.Errorf("Check: %+v, %v", ws, err)
	}
}
