package backends

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// ModeKubernetes is the /healthz mode of a runner whose messages run in
// Pods.
const ModeKubernetes = "kubernetes"

// newKube connects with the pod's service account and makes the pod
// backend, which deletes this agent's orphan pods first.
func newKube(ctx context.Context, cfg *agentspec.Config, relay Relay, log hclog.Logger) (sandbox.Backend, string, error) {
	// In a runner pod: the process and its logger live as long.
	kube.RouteClientLogs(log)
	c, err := kube.InCluster(cfg.Kubernetes.Namespace)
	if err != nil {
		return nil, ModeKubernetes, err
	}
	return NewKube(ctx, c, cfg, relay, log)
}

// NewKube makes the pod backend on client c; its asks find their
// targets' runner pods with the same client, and its pods reach relay on
// their own attach.
func NewKube(ctx context.Context, c *kube.Client, cfg *agentspec.Config, relay Relay, log hclog.Logger) (sandbox.Backend, string, error) {
	o := kube.OptionsFor(cfg, log)
	if agentspec.NeedsRelay(cfg) {
		o.Relay = relay.ServeConn
	}
	p, err := kube.NewPods(ctx, c, o)
	if err != nil {
		return nil, ModeKubernetes, err
	}
	return &kubeBackend{Pods: p, c: c}, ModeKubernetes, nil
}

// kubeBackend is the pod backend with the API client asks use.
type kubeBackend struct {
	*kube.Pods
	c *kube.Client
}

// DialRunner connects to an ask target's runner: its ready pod in this
// runner's namespace, found by label through the API at each ask (so a
// rolled runner is found at its new address), at its pod IP.
func (b *kubeBackend) DialRunner(ctx context.Context, t agentspec.AskTarget) (net.Conn, error) {
	ip, err := runnerPodIP(ctx, b.c, t.AgentID)
	if err != nil {
		return nil, err
	}
	return (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(ip, strconv.Itoa(t.Port)))
}

// runnerPodIP is the IP of an agent's ready runner pod.
func runnerPodIP(ctx context.Context, c *kube.Client, agentID string) (string, error) {
	list, err := c.Clientset.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.RunnerSelector(agentID)})
	if err != nil {
		return "", fmt.Errorf("find agent %s's runner pod: %w", agentID, err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" && podReady(&p) {
			return p.Status.PodIP, nil
		}
	}
	return "", fmt.Errorf("agent %s has no ready runner pod in namespace %s", agentID, c.Namespace)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
