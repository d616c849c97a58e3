package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// ModeKubernetes is the /healthz mode of a runner whose messages run in
// Pods.
const ModeKubernetes = "kubernetes"

// validateKubernetes checks what a runner in a cluster can honour; it
// fails closed where the Docker meaning of a setting has no pod
// equivalent yet.
func validateKubernetes(c *agentspec.Config) error {
	k := c.Kubernetes
	if k == nil {
		return nil
	}
	var errs []error
	if !c.Container.Enabled {
		errs = append(errs, errors.New("kubernetes: needs container_mode.enabled: messages run in pods, there is no host mode in a cluster"))
	}
	if (k.Topology == "") != (c.Role == "") {
		// On a cluster a role's network is its topology's NetworkPolicies,
		// which find the pods by these labels: a role without them would
		// run with the cluster network open.
		errs = append(errs, fmt.Errorf("kubernetes: role %q and threegate_topology %q: a threegate role needs its topology and the other way round", c.Role, k.Topology))
	}
	if len(c.Container.Networks) > 0 {
		errs = append(errs, errors.New("kubernetes: container_mode.networks are Docker networks; pods are placed by labels and NetworkPolicies"))
	}
	// Without a role, container_mode.network "none" (or empty) and
	// "bridge" are accepted: a pod always joins the cluster network, and
	// kubedeploy puts the agent's message pods under a NetworkPolicy of
	// their own before the runner starts (kubedeploy.MessagePolicy). The
	// runner cannot see that policy, so it makes each pod wait until the
	// API server is blocked before agent-run reads its request
	// (policyProbe): a pod the policy does not cover never runs a message.
	if c.Role == "" && !agentspec.OwnPolicy(c) {
		errs = append(errs, fmt.Errorf("kubernetes: container_mode.network %q: a cluster has no Docker networks; use none or bridge", c.Container.Network))
	}
	if _, err := kube.HardenedPod(KubeOptions(c, nil).Spec, "check", ""); err != nil {
		errs = append(errs, fmt.Errorf("kubernetes: %w", err))
	}
	return errors.Join(errs...)
}

// KubeOptions maps a runner config onto the pod backend's options.
func KubeOptions(cfg *agentspec.Config, log hclog.Logger) kube.Options {
	k, cm := cfg.Kubernetes, cfg.Container
	return kube.Options{
		Spec: kube.PodSpec{
			AgentID:          cfg.AgentID,
			Topology:         k.Topology,
			Role:             ThreeGateRole(cfg.Role),
			Image:            cm.Image,
			ImagePullPolicy:  corev1.PullPolicy(k.ImagePullPolicy),
			MemoryLimit:      cm.MemoryLimit,
			CPULimit:         k.CPULimit,
			User:             cm.User,
			WorkspaceClaim:   k.WorkspaceClaim,
			WorkspaceSubPath: k.WorkspaceSubPath,
			RuntimeClass:     k.RuntimeClass,
			Env:              cfg.Env,
			AwaitBlocked:     policyProbe(),
		},
		Prestart: cm.Prestart,
		Logger:   log,
	}
}

// policyProbe is what a confined message pod must find blocked before it
// runs anything: the API server as this runner reaches it (the kubelet's,
// or kubedeploy's api_server, variables), which every topology member's
// policies and every agent's own message policy forbid, and an unconfined
// pod reaches. Outside a cluster there is nothing to wait for.
//
// Every config validateKubernetes accepts is confined: a role by its
// topology's policies, any other agent by its own message policy.
func policyProbe() []string {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil
	}
	return []string{net.JoinHostPort(host, port)}
}

// ThreeGateRole is an agent's role as package topology and the pod labels
// name it ("tool_exec" is TOOL_EXEC); "" stays "".
func ThreeGateRole(role string) string {
	return map[string]string{
		agentspec.RoleCore: topospec.RoleCore, agentspec.RoleFetch: topospec.RoleFetch, agentspec.RoleToolExec: topospec.RoleToolExec,
	}[role]
}

// newKubeBackend connects with the pod's service account and makes the pod
// backend, which deletes this agent's orphan pods first.
func newKubeBackend(ctx context.Context, cfg *agentspec.Config, log hclog.Logger) (sandbox.Backend, string, error) {
	// In a runner pod: the process and its logger live as long.
	kube.RouteClientLogs(log)
	c, err := kube.InCluster(cfg.Kubernetes.Namespace)
	if err != nil {
		return nil, ModeKubernetes, err
	}
	return NewKubeBackend(ctx, c, cfg, log)
}

// NewKubeBackend makes the pod backend on client c; its asks find their
// targets' runner pods with the same client.
func NewKubeBackend(ctx context.Context, c *kube.Client, cfg *agentspec.Config, log hclog.Logger) (sandbox.Backend, string, error) {
	p, err := kube.NewPods(ctx, c, KubeOptions(cfg, log))
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
