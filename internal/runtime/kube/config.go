package kube

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// ValidateConfig is the one check of a runner config: agentspec.Validate,
// and for a cluster config the message pod it describes, built as the
// runner's pod backend builds it (OptionsFor). The runner runs it at start
// and kubedeploy's plan on the config it would write, so a plan refuses
// what the runner would, without linking the runner.
func ValidateConfig(c *agentspec.Config) error {
	err := agentspec.Validate(c)
	if c.Kubernetes == nil {
		return err
	}
	if _, perr := HardenedPod(OptionsFor(c, nil).Spec, "check", ""); perr != nil {
		return errors.Join(err, fmt.Errorf("runner config: kubernetes: %w", perr))
	}
	return err
}

// OptionsFor maps a runner config with a kubernetes section onto the pod
// backend's options.
func OptionsFor(cfg *agentspec.Config, log hclog.Logger) Options {
	k, cm := cfg.Kubernetes, cfg.Container
	return Options{
		Spec: PodSpec{
			AgentID:          cfg.AgentID,
			Topology:         k.Topology,
			Role:             agentspec.ThreeGateRole(cfg.Role),
			Image:            cm.Image,
			ImagePullPolicy:  corev1.PullPolicy(k.ImagePullPolicy),
			MemoryLimit:      cm.MemoryLimit,
			CPULimit:         k.CPULimit,
			User:             cm.User,
			WorkspaceClaim:   k.WorkspaceClaim,
			WorkspaceSubPath: k.WorkspaceSubPath,
			RuntimeClass:     k.RuntimeClass,
			Env:              cfg.Env,
			AwaitBlocked:     PolicyProbe(),
		},
		Prestart: cm.Prestart,
		Logger:   log,
	}
}

// PolicyProbe is what a confined message pod must find blocked before it
// runs anything: the API server as this runner reaches it (the kubelet's,
// or kubedeploy's api_server, variables), which every topology member's
// policies and every agent's own message policy forbid, and an unconfined
// pod reaches. Outside a cluster there is nothing to wait for.
//
// Every config ValidateConfig accepts is confined: a role by its
// topology's policies, any other agent by its own message policy.
func PolicyProbe() []string {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil
	}
	return []string{net.JoinHostPort(host, port)}
}
