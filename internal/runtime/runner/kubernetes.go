package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// ModeKubernetes is the /healthz mode of a runner whose messages run in
// Pods.
const ModeKubernetes = "kubernetes"

// Kubernetes is the config section of a runner that runs inside a cluster:
// each message gets a fresh hardened Pod (kube.Pods) in Namespace, made
// with the runner's own service account. container_mode gives the image,
// memory limit, user, timeout and prestart as for Docker.
type Kubernetes struct {
	// Namespace of the per-message pods; empty is the runner pod's own.
	Namespace string `json:"namespace,omitempty"`
	// WorkspaceClaim is the PersistentVolumeClaim each message pod mounts
	// at /workspace; WorkspaceSubPath a directory inside it.
	WorkspaceClaim   string `json:"workspace_claim"`
	WorkspaceSubPath string `json:"workspace_sub_path,omitempty"`
	// ImagePullPolicy of container_mode.image: Always, IfNotPresent
	// (default) or Never (an image imported into the nodes).
	ImagePullPolicy string `json:"image_pull_policy,omitempty"`
	// CPULimit is a quantity ("500m", "2"); default kube.DefaultCPULimit.
	CPULimit string `json:"cpu_limit,omitempty"`
	// RuntimeClass is the pods' runtimeClassName, container_mode.runtime's
	// counterpart; empty is the cluster's default runtime.
	RuntimeClass string `json:"runtime_class,omitempty"`
}

// validateKubernetes checks what a runner in a cluster can honour; it
// fails closed where the Docker meaning of a setting has no pod
// equivalent yet.
func (c *Config) validateKubernetes() error {
	k := c.Kubernetes
	if k == nil {
		return nil
	}
	var errs []error
	if !c.Container.Enabled {
		errs = append(errs, errors.New("kubernetes: needs container_mode.enabled: messages run in pods, there is no host mode in a cluster"))
	}
	if len(c.Ask) > 0 {
		// An ask goes from runner to runner; on a cluster that is a
		// Service, which the ask targets do not name yet.
		errs = append(errs, errors.New("kubernetes: threegate ask targets are runners on this Docker host; asks between runners in a cluster are not supported yet"))
	}
	if len(c.Container.Networks) > 0 {
		errs = append(errs, errors.New("kubernetes: container_mode.networks are Docker networks; pods are placed by labels and NetworkPolicies"))
	}
	if n := c.Container.Network; (n == "" || n == "none") && c.Role == "" {
		// A pod always has the cluster network; "none" would need a
		// policy the runner cannot see, so it is refused rather than
		// silently widened.
		errs = append(errs, errors.New("kubernetes: container_mode.network \"none\": a pod always joins the cluster network; use \"bridge\" (and NetworkPolicies) or a threegate role"))
	}
	if _, err := kube.HardenedPod(KubeOptions(c, nil).Spec, "check", ""); err != nil {
		errs = append(errs, fmt.Errorf("kubernetes: %w", err))
	}
	return errors.Join(errs...)
}

// KubeOptions maps a runner config onto the pod backend's options.
func KubeOptions(cfg *Config, log hclog.Logger) kube.Options {
	k, cm := cfg.Kubernetes, cfg.Container
	return kube.Options{
		Spec: kube.PodSpec{
			AgentID:          cfg.AgentID,
			Role:             strings.ReplaceAll(cfg.Role, "_", "-"),
			Image:            cm.Image,
			ImagePullPolicy:  corev1.PullPolicy(k.ImagePullPolicy),
			MemoryLimit:      cm.MemoryLimit,
			CPULimit:         k.CPULimit,
			User:             cm.User,
			WorkspaceClaim:   k.WorkspaceClaim,
			WorkspaceSubPath: k.WorkspaceSubPath,
			RuntimeClass:     k.RuntimeClass,
			Env:              cfg.Env,
		},
		Prestart: cm.Prestart,
		Logger:   log,
	}
}

// newKubeBackend connects with the pod's service account and makes the pod
// backend, which deletes this agent's orphan pods first.
func newKubeBackend(ctx context.Context, cfg *Config, log hclog.Logger) (sandbox.Backend, string, error) {
	c, err := kube.InCluster(cfg.Kubernetes.Namespace)
	if err != nil {
		return nil, ModeKubernetes, err
	}
	p, err := kube.NewPods(ctx, c, KubeOptions(cfg, log))
	if err != nil {
		return nil, ModeKubernetes, err
	}
	return p, ModeKubernetes, nil
}

// ownGroup reports whether a file's group is this process's effective
// group.
func ownGroup(st fs.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Gid) == os.Getegid()
}
