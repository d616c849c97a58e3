package kubedeploy

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// putAgent writes an agent's config Secret as Apply leaves it.
func putAgent(t *testing.T, svc *Service, id, role, topology string) {
	t.Helper()
	a := testAgent(id, "img", "")
	a.Config.Token, a.Config.Role, a.ThreegateNetwork = "tok-"+id, role, topology
	if role == agentspec.RoleFetch {
		putTopology(t, svc, topology)
	}
	if err := svc.complete(context.Background(), &a); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(a.Config)
	if err != nil {
		t.Fatal(err)
	}
	n := NamesFor(id)
	_, err = svc.o.Client.Clientset.CoreV1().Secrets("agents").Create(context.Background(),
		ConfigSecret(n, "agents", id, raw, []byte(strings.Repeat("ab", 16))), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// ResolveAsk takes fetch and tool_exec agents of the same topology, with
// their runners' port and token from their Secrets, and refuses anything
// else by name; a target not applied yet is ErrAskTargetNotDeployed.
func TestResolveAsk(t *testing.T) {
	svc, _ := fakeService()
	putAgent(t, svc, "te", "tool_exec", "tg")
	putAgent(t, svc, "fe", "fetch", "tg")
	putAgent(t, svc, "other-te", "tool_exec", "tg2")
	putAgent(t, svc, "core2", "core", "tg")
	putAgent(t, svc, "plain", "", "")
	ctx := context.Background()
	got, err := svc.ResolveAsk(ctx, "tg", []string{"te", "fe"})
	want := []agentspec.AskTarget{{AgentID: "te", Role: "tool_exec", Port: DefaultPort, Token: "tok-te"}, {AgentID: "fe", Role: "fetch", Port: DefaultPort, Token: "tok-fe"}}
	if err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ResolveAsk = %+v, %v", got, err)
	}
	for id, msg := range map[string]string{
		"other-te": `not in the threegate_network "tg"`, "core2": `role is "core"`, "plain": `role is "none"`,
		"ghost": "not deployed yet", "Bad Id": "not an agent id",
	} {
		_, err := svc.ResolveAsk(ctx, "tg", []string{id})
		if err == nil || !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), `ask "`+id+`"`) {
			t.Errorf("ask %s: %v, want %q", id, err, msg)
		}
		if (id == "ghost") != errors.Is(err, agentspec.ErrAskTargetNotDeployed) {
			t.Errorf("ask %s: ErrAskTargetNotDeployed = %v", id, errors.Is(err, agentspec.ErrAskTargetNotDeployed))
		}
	}
	if _, err := svc.ResolveAsk(ctx, "", []string{"te"}); err == nil || !strings.Contains(err.Error(), "threegate topology") {
		t.Errorf("ask outside a topology: %v", err)
	}
}

// Apply's completion puts the targets' tokens into the asking runner's own
// config (its Secret), and a bad target fails on threegate.ask.
func TestCompleteAsk(t *testing.T) {
	svc, _ := fakeService()
	putAgent(t, svc, "te", "tool_exec", "tg")
	a := testAgent("core", "img", "")
	a.Config.Token, a.Config.Role, a.ThreegateNetwork, a.ThreegateAsk = "tok", "core", "tg", []string{"te"}
	a.Config.Ask = []agentspec.AskTarget{{AgentID: "smuggled", Role: "fetch", Port: 1, Token: "x"}}
	if err := svc.complete(context.Background(), &a); err != nil {
		t.Fatal(err)
	}
	if len(a.Config.Ask) != 1 || a.Config.Ask[0].Token != "tok-te" || a.Config.Ask[0].Listen != "" || a.Config.Kubernetes.Topology != "tg" {
		t.Errorf("completed ask %+v, kubernetes %+v", a.Config.Ask, a.Config.Kubernetes)
	}
	a.ThreegateAsk = []string{"te", "ghost"}
	// A target not deployed yet is waited for (agentspec.AskWait, 5 min)
	// while the apply's context lasts; a short one ends the wait.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := svc.complete(ctx, &a)
	var se *fault.StepError
	if !errors.As(err, &se) || se.Field != "threegate.ask" || se.Step != agentspec.StepAsk || !strings.Contains(err.Error(), `ask "ghost"`) {
		t.Errorf("a missing target: %v (%+v)", err, se)
	}
	// A role without its topology is refused, never deployed open.
	b := testAgent("loose", "img", "")
	b.Config.Token, b.Config.Role = "tok", "tool_exec"
	if err := svc.complete(context.Background(), &b); err == nil || !strings.Contains(err.Error(), "needs its topology") {
		t.Errorf("role without topology: %v", err)
	}
}

// The runner pod of a topology member carries the topology, its role as
// topology names it and the runner mark; the selector stays the agent's.
func TestRunnerDeploymentThreeGateLabels(t *testing.T) {
	d, err := RunnerDeployment(NamesFor("a"), "ns", RunnerPod{AgentID: "a", Image: "img", Port: 8080, Topology: "tg", Role: "TOOL_EXEC"})
	if err != nil {
		t.Fatal(err)
	}
	l := d.Spec.Template.Labels
	if l[kube.ThreeGateLabelTopology] != "tg" || l[kube.ThreeGateLabelRole] != "TOOL_EXEC" || l[kube.ThreeGateLabelRunner] != "true" ||
		l[kube.ThreeGateLabelExecution] != "" || len(l) != len(Labels("a"))+3 {
		t.Errorf("template labels %v", l)
	}
	if len(d.Spec.Selector.MatchLabels) != len(Labels("a")) || len(d.Labels) != len(Labels("a")) {
		t.Errorf("selector %v, deployment labels %v: want the agent's labels only", d.Spec.Selector.MatchLabels, d.Labels)
	}
	if _, err := RunnerDeployment(NamesFor("a"), "ns", RunnerPod{AgentID: "a", Topology: "tg"}); err == nil {
		t.Error("a topology without a role accepted")
	}
}

// The asking runner's Secret round-trips through Import into the ids the
// owner wrote.
func TestImportAsk(t *testing.T) {
	svc, _ := fakeService()
	putAgent(t, svc, "te", "tool_exec", "tg")
	a := testAgent("core", "img", "")
	a.Config.Token, a.Config.Role, a.ThreegateNetwork, a.ThreegateAsk = "tok", "core", "tg", []string{"te"}
	ctx := context.Background()
	if err := svc.complete(ctx, &a); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(a.Config)
	_, err := svc.o.Client.Clientset.CoreV1().Secrets("agents").Create(ctx, ConfigSecret(NamesFor("core"), "agents", "core", raw, []byte("k")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	imp, err := svc.Import(ctx, "core")
	if err != nil || imp.ThreegateNetwork != "tg" || len(imp.ThreegateAsk) != 1 || imp.ThreegateAsk[0] != "te" {
		t.Errorf("Import = %+v, %v", imp, err)
	}
}

// putTopology writes what a FETCH agent's apply reads of its topology:
// the key Secret, the proxy Deployment's record and a running proxy pod.
func putTopology(t *testing.T, svc *Service, name string) {
	t.Helper()
	ctx, cs, ns := context.Background(), svc.o.Client.Clientset, "agents"
	if _, err := cs.CoreV1().Secrets(ns).Get(ctx, kube.EgressKeySecretName(name), metav1.GetOptions{}); err == nil {
		return
	}
	rec, err := topospec.MarshalRecord(topospec.Spec{Name: name})
	testutil.Must(t, err)
	_, err = cs.CoreV1().Secrets(ns).Create(ctx, kube.EgressKeySecret(name, ns, make([]byte, proxy.KeySize)), metav1.CreateOptions{})
	testutil.Must(t, err)
	_, err = cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: topospec.ProxyName(name),
		Labels: kube.ThreeGateObjectLabels(name), Annotations: map[string]string{kube.AnnotationTopologySpec: rec}}}, metav1.CreateOptions{})
	testutil.Must(t, err)
	_, err = cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: topospec.ProxyName(name) + "-0", Labels: kube.ThreeGateProxyLabels(name)},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "proxy"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.9", ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}, metav1.CreateOptions{})
	testutil.Must(t, err)
}
