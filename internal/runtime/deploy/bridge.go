package deploy

import (
	"context"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/bridge"
)

// StepBridge is the step that makes the managed bridge network.
const StepBridge = "managed bridge"

// TopicBridgeDrift is the Warning a Read gives when the managed bridge
// network, its rules or its guard are missing or differ.
const TopicBridgeDrift = "managed bridge drift"

// usesBridge reports whether the agent's per-message containers join the
// managed bridge (network = "bridge" in container mode, no threegate).
func usesBridge(a Agent) bool {
	cm := a.Config.Container
	return cm.Enabled && len(cm.Networks) == 0 && cm.Network == "bridge" && a.Meta.ThreegateNetwork == ""
}

// ensureBridge makes the managed bridge, its rules and its guard before
// the runner that will start containers on it (see package bridge).
func (s *Service) ensureBridge(ctx context.Context, cli client.APIClient, a Agent) error {
	if !usesBridge(a) {
		return nil
	}
	if err := bridge.Ensure(ctx, cli, a.Config.Container.Image, bridge.HostResolvers(), s.log); err != nil {
		return stepErr(StepBridge, "container_mode.network", "making the managed bridge network "+bridge.Name, err)
	}
	return nil
}

// bridgeDrift marks a running runner stale when its managed bridge is not
// in force, so that the next plan applies the agent again and Ensure
// restores what is missing.
func (s *Service) bridgeDrift(ctx context.Context, cli client.APIClient, a Agent, o *Observed) error {
	if !usesBridge(a) {
		return nil
	}
	drift, err := bridge.Drift(ctx, cli, a.Config.Container.Image, bridge.HostResolvers())
	if err != nil {
		return stepErr(StepRead, "container_mode.network", "reading the managed bridge network "+bridge.Name, err)
	}
	for _, d := range drift {
		o.Warnings = append(o.Warnings, Warning{Topic: TopicBridgeDrift, Detail: d})
	}
	if len(drift) > 0 && o.RunnerStatus == StatusRunning {
		s.log.Warn("managed bridge drift", "agent_id", a.Config.AgentID, "drift", drift)
		o.RunnerStatus = StatusStale
	}
	return nil
}
