package backends

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// runnerPod is an agent's runner pod as kubedeploy labels it.
func runnerPod(name, ns, agentID, ip string, ready bool, deleting bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: engine.Labels(kube.ComponentRunner, map[string]string{"agent": agentID})},
		Status: corev1.PodStatus{PodIP: ip, Phase: corev1.PodRunning},
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if deleting {
		now := metav1.Now()
		p.DeletionTimestamp = &now
	}
	return p
}

// The target's runner is its ready pod in this namespace, found by its
// labels: not a pod of another agent, another namespace, a pod not ready
// or one being deleted, and not a message pod of the target.
func TestRunnerPodIP(t *testing.T) {
	msg := runnerPod("te-msg", "ns", "te", "10.0.0.9", true, false)
	msg.Labels = engine.Labels(sandbox.Component, map[string]string{"agent": "te"})
	cs := fake.NewClientset(
		runnerPod("te-old", "ns", "te", "10.0.0.1", true, true),
		runnerPod("te-starting", "ns", "te", "10.0.0.2", false, false),
		runnerPod("te-elsewhere", "other", "te", "10.0.0.3", true, false),
		runnerPod("fe", "ns", "fe", "10.0.0.4", true, false),
		msg,
	)
	c := &kube.Client{Clientset: cs, Namespace: "ns"}
	ctx := context.Background()
	if ip, err := runnerPodIP(ctx, c, "te"); err == nil || !strings.Contains(err.Error(), "agent te has no ready runner pod in namespace ns") {
		t.Errorf("no ready pod: %q, %v", ip, err)
	}
	_, err := cs.CoreV1().Pods("ns").Create(ctx, runnerPod("te-new", "ns", "te", "10.0.0.5", true, false), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ip, err := runnerPodIP(ctx, c, "te"); err != nil || ip != "10.0.0.5" {
		t.Errorf("runnerPodIP = %q, %v; want the ready pod's 10.0.0.5", ip, err)
	}
}
