package kubedeploy

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"

	admv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the policy holds a runner's pods to comes from the pod the runner
// would make for its config, and every rule applies to the parameter's own
// runner only: other users' requests (the admin, the controllers) are
// never judged by it.
func TestAdmissionFor(t *testing.T) {
	c := agentspec.Config{
		AgentID: "tx", Role: agentspec.RoleToolExec,
		Container:  agentspec.ContainerMode{Enabled: true, Image: "reg/img:1", MemoryLimit: agentspec.SizeOf(256 << 20)},
		Kubernetes: &agentspec.Kubernetes{WorkspaceClaim: "meepa-tx-workspace", Topology: "tg", CPULimit: "500m", RuntimeClass: "gvisor"},
	}
	a, err := AdmissionFor(&c, "agents")
	if err != nil {
		t.Fatal(err)
	}
	want := Admission{AgentID: "tx", Image: "reg/img:1", Claim: "meepa-tx-workspace", Topology: "tg", Role: "TOOL_EXEC",
		RoleFlag: "--role=tool_exec", RuntimeClass: "gvisor", Memory: "256Mi", CPU: "500m"}
	if a != want {
		t.Errorf("AdmissionFor = %+v, want %+v", a, want)
	}
	if got := a.Annotations(); len(got) != 9 || got[AnnoPodImage] != "reg/img:1" || got[AnnoPodRoleFlag] != "--role=tool_exec" {
		t.Errorf("annotations %v", got)
	}
	c.Kubernetes = nil
	if _, err := AdmissionFor(&c, "agents"); err == nil {
		t.Error("a config without a kubernetes section was accepted")
	}
}

func TestAdmissionPolicy(t *testing.T) {
	p := AdmissionPolicy()
	if p.Spec.ParamKind == nil || p.Spec.ParamKind.Kind != "ServiceAccount" || p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != "Fail" {
		t.Errorf("policy spec %+v", p.Spec)
	}
	if len(p.Spec.Validations) < 20 {
		t.Errorf("%d validations", len(p.Spec.Validations))
	}
	for _, v := range p.Spec.Validations {
		if !strings.HasPrefix(v.Expression, "!variables.mine ||") && !strings.HasPrefix(v.Expression, "!variables.creating ||") {
			t.Errorf("a rule that judges others' requests too: %s", v.Expression)
		}
		if v.Message == "" {
			t.Errorf("no message: %s", v.Expression)
		}
	}
	b := AdmissionBinding()
	if b.Spec.PolicyName != p.Name || b.Spec.ParamRef == nil || b.Spec.ParamRef.Selector == nil || b.Spec.ParamRef.Namespace != "" ||
		len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != "Deny" {
		t.Errorf("binding %+v", b.Spec)
	}
	// The runner's ServiceAccount is selected as a parameter.
	sa := ServiceAccount(NamesFor("x"), "agents", "x")
	for k, v := range b.Spec.ParamRef.Selector.MatchLabels {
		if sa.Labels[k] != v {
			t.Errorf("the binding selects %s=%s, the runner's ServiceAccount has %q", k, v, sa.Labels[k])
		}
	}
	if strings.Contains(kube.RunnerName("a.b"), ".") {
		t.Error("a runner name with a dot: its message pod prefix would not prove the agent")
	}
}

// Check warns, on every plan, when the provider ships no admission policy
// (runner_admission_policy = false) and gives no warning otherwise; an
// egress policy is not refused (the topology's proxy Deployment enforces
// it).
func TestCheckWarnsAdmissionOff(t *testing.T) {
	a := agentspec.Agent{Config: agentspec.Config{AgentID: "a", Container: agentspec.ContainerMode{Enabled: true}}}
	for _, skip := range []bool{false, true} {
		ws, err := NewBackend(NewService(Options{SkipAdmission: skip})).Check(a)
		if err != nil || (len(ws) == 1) != skip || (skip && (ws[0].Topic != TopicAdmissionOff || !strings.Contains(ws[0].Detail, "one trust domain per namespace"))) {
			t.Errorf("skip %v: Check = %+v, %v", skip, ws, err)
		}
	}
	a.Config.Egress = &agentspec.Egress{}
	if _, err := NewBackend(NewService(Options{})).Check(a); err != nil {
		t.Errorf("Check with egress = %v, want none", err)
	}
}

// Each build's policy is named and labelled by a hash of its rules, and
// its binding takes only runners of that version as parameters: a release
// with other rules neither overwrites the rules older runners need nor
// judges their pods.
func TestAdmissionVersioned(t *testing.T) {
	p, b, v := AdmissionPolicy(), AdmissionBinding(), AdmissionVersion()
	if len(v) != 10 || p.Name != AdmissionPolicyPrefix+"-"+v || b.Name != p.Name || p.Labels[LabelAdmission] != v {
		t.Errorf("policy %s %v, binding %s, version %q", p.Name, p.Labels, b.Name, v)
	}
	if b.Spec.ParamRef.Selector.MatchLabels[LabelAdmission] != v {
		t.Errorf("the binding takes runners of any version: %v", b.Spec.ParamRef.Selector.MatchLabels)
	}
	if sa := ServiceAccount(NamesFor("x"), "agents", "x"); sa.Labels[LabelAdmission] != v {
		t.Errorf("a runner's ServiceAccount without its version: %v", sa.Labels)
	}
}

// pruneAdmission removes a version no runner ServiceAccount of any
// namespace carries once it is older than the grace, keeps one in use (in
// any namespace) or just made, and keeps the unversioned policy of earlier
// releases while one of their runners is left.
func TestPruneAdmission(t *testing.T) {
	svc, cs := fakeService()
	ctx := context.Background()
	adm := cs.AdmissionregistrationV1()
	policy := func(name, version string, age time.Duration) {
		l := engine.Labels(kube.ComponentRunner, nil)
		if version != "" {
			l[LabelAdmission] = version
		}
		m := metav1.ObjectMeta{Name: name, Labels: l, CreationTimestamp: metav1.NewTime(time.Now().Add(-age))}
		testutil.Must(t, create(adm.ValidatingAdmissionPolicies().Create(ctx, &admv1.ValidatingAdmissionPolicy{ObjectMeta: m}, metav1.CreateOptions{})))
		testutil.Must(t, create(adm.ValidatingAdmissionPolicyBindings().Create(ctx, &admv1.ValidatingAdmissionPolicyBinding{ObjectMeta: m}, metav1.CreateOptions{})))
	}
	runner := func(ns, name, version string) {
		sa := ServiceAccount(NamesFor(name), ns, name)
		if version == "" {
			delete(sa.Labels, LabelAdmission)
		} else {
			sa.Labels[LabelAdmission] = version
		}
		testutil.Must(t, create(cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})))
	}
	hour := time.Hour
	policy(legacyAdmission, "", hour)
	policy(AdmissionPolicyPrefix+"-unused", "unused", hour)
	policy(AdmissionPolicyPrefix+"-other-ns", "other-ns", hour)
	policy(AdmissionPolicyPrefix+"-just-made", "just-made", time.Second)
	policy("someone-elses", "", hour)
	runner("agents", "a", AdmissionVersion())
	runner("team-b", "b", "other-ns")
	runner("team-c", "old", "")

	left := func() []string {
		var names []string
		ps, err := adm.ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
		testutil.Must(t, err)
		bs, err := adm.ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
		testutil.Must(t, err)
		if len(ps.Items) != len(bs.Items) {
			t.Errorf("%d policies but %d bindings", len(ps.Items), len(bs.Items))
		}
		for _, p := range ps.Items {
			names = append(names, p.Name)
		}
		slices.Sort(names)
		return names
	}
	svc.pruneAdmission(ctx)
	want := []string{legacyAdmission, AdmissionPolicyPrefix + "-just-made", AdmissionPolicyPrefix + "-other-ns", "someone-elses"}
	if got := left(); !slices.Equal(got, want) {
		t.Errorf("after pruning: %v, want %v", got, want)
	}
	testutil.Must(t, cs.CoreV1().ServiceAccounts("team-c").Delete(ctx, NamesFor("old").Base, metav1.DeleteOptions{}))
	svc.pruneAdmission(ctx)
	want = []string{AdmissionPolicyPrefix + "-just-made", AdmissionPolicyPrefix + "-other-ns", "someone-elses"}
	if got := left(); !slices.Equal(got, want) {
		t.Errorf("after the last runner of an earlier release went: %v, want %v", got, want)
	}
}
