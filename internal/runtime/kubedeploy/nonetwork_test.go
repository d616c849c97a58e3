package kubedeploy

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	netv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// The no-network policy selects every message pod of its agent (with a
// message or prestarted) and nothing else: not the agent's runner pod, not
// another agent's pods; it has both policy types and no rule.
func TestNoNetworkPolicySelectsMessagePods(t *testing.T) {
	pol, err := NoNetworkPolicy(NamesFor("a1"), "agents", "a1")
	if err != nil {
		t.Fatal(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&pol.Spec.PodSelector)
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
	if !slices.Equal(pol.Spec.PolicyTypes, []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress}) ||
		len(pol.Spec.Ingress) != 0 || len(pol.Spec.Egress) != 0 {
		t.Errorf("policy spec %+v: want both types and no rule", pol.Spec)
	}
	if pol.Labels[LabelNoNetwork] != "a1" || pol.Namespace != "agents" {
		t.Errorf("policy meta %+v", pol.ObjectMeta)
	}
}

// A no-network agent's policy is made by apply, read back as missing or
// changed when deleted or edited, restored by the next apply, and removed
// with the agent; a bridge agent gets none, and its apply removes one left
// from an earlier network "none".
func TestNoNetworkPolicyLifecycle(t *testing.T) {
	svc, cs := fakeService()
	ctx := context.Background()
	np := cs.NetworkingV1().NetworkPolicies("agents")
	a := testAgent("quiet", "img", "")
	a.Config.Container.Network = "none"
	name := NamesFor("quiet").Base + "-no-network"
	read := func() Observed {
		t.Helper()
		var o Observed
		if err := svc.readNoNetworkPolicy(ctx, &a.Config, &o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	if o := read(); !slices.Equal(o.Missing, []string{"NetworkPolicy"}) {
		t.Errorf("before apply: %+v", o)
	}
	if err := svc.applyNoNetworkPolicy(ctx, a); err != nil {
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
	if err := svc.applyNoNetworkPolicy(ctx, a); err != nil {
		t.Fatal(err)
	}
	if o := read(); len(o.Changed) != 0 {
		t.Errorf("after a second apply: %+v", o)
	}
	if err := svc.Remove(ctx, "quiet", false); err != nil {
		t.Fatal(err)
	}
	if _, err := np.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("policy after Remove: %v", err)
	}

	b := testAgent("open", "img", "")
	if err := svc.applyNoNetworkPolicy(ctx, b); err != nil {
		t.Fatal(err)
	}
	var o Observed
	if err := svc.readNoNetworkPolicy(ctx, &b.Config, &o); err != nil || len(o.Missing) != 0 {
		t.Errorf("bridge agent read: %+v %v", o, err)
	}
	if list, _ := np.List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("a bridge agent got policies: %v", list.Items)
	}
	// A role's network is its topology's: no policy of this kind.
	c := testAgent("member", "img", "")
	c.Config.Container.Network, c.Config.Role = "", "tool_exec"
	if err := svc.applyNoNetworkPolicy(ctx, c); err != nil {
		t.Fatal(err)
	}
	if list, _ := np.List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("a topology member got a no-network policy: %v", list.Items)
	}
	// Switching "none" to "bridge": the old policy goes.
	stale, _ := NoNetworkPolicy(NamesFor("open"), "agents", "open")
	if _, err := np.Create(ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := svc.removeNoNetworkPolicy(ctx, "open"); err != nil {
		t.Fatal(err)
	}
	if list, _ := np.List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("policies left: %v", list.Items)
	}
}

// soul, memory and manage_soul pass Check, go into the runner's config as
// its seed (so a new soul is a new config hash), come back with Import,
// and read as configured (the claim is not read).
func TestBackendSeed(t *testing.T) {
	svc, cs := fakeService()
	b := NewBackend(svc)
	ctx := context.Background()
	a := deploy.Agent{Config: testAgent("seeded", "img", "").Config,
		Meta: deploy.Meta{Soul: "You are brief.", Memory: "Nothing yet.", ManageSoul: true, ForceDestroyWorkspace: true}}
	a.Config.Container.Network = "none"
	a.Config.Token = "tok"
	if errs := Check(a); len(errs) != 0 {
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
	hash := func(a deploy.Agent) string {
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
