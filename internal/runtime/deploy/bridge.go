package deploy

import (
	"context"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/bridge"
)

// StepBridge is the step that makes the managed bridge network.
const StepBridge = "managed bridge"

// TopicBridgeDrift is the Warning a Read gives when the managed bridge
// network, its rules or its guard are missing or differ.
const TopicBridgeDrift = "managed bridge drift"

// usesBridge reports whether the agent's sandbox is on the managed bridge:
// the per-message containers of network = "bridge" in container mode, or
// a host-mode agent's runner container when its tools have network (they
// share the runner's network namespace). Never with threegate, whose role
// decides the networks, nor for an external runner, which is a host
// process.
func usesBridge(a agentspec.Agent) bool {
	cm, fa := a.Config.Container, a.Config.FileAccess
	if len(cm.Networks) > 0 || a.Meta.ThreegateNetwork != "" {
		return false
	}
	if cm.Enabled {
		return cm.Network == "bridge"
	}
	return a.Deployment() == agentspec.ModeContainer && (fa.AllowNetwork || fa.Unrestricted)
}

// bridgeAttr is the attribute that put the agent on the managed bridge,
// and bridgeImage the image its guard runs (it has agent-runner).
func bridgeAttr(a agentspec.Agent) string {
	if a.Config.Container.Enabled {
		return "container_mode.network"
	}
	return "file_access.allow_network"
}

func bridgeImage(a agentspec.Agent) string {
	if a.Config.Container.Enabled {
		return a.Config.Container.Image
	}
	return a.RunnerImage()
}

// ensureBridge makes the managed bridge, its rules and its guard before
// the runner that will start containers on it, or (host mode) join it
// (see package bridge).
func (s *Service) ensureBridge(ctx context.Context, cli client.APIClient, a agentspec.Agent) error {
	if !usesBridge(a) {
		return nil
	}
	if err := bridge.Ensure(ctx, cli, bridgeImage(a), bridge.HostResolvers(), s.log); err != nil {
		return stepErr(StepBridge, bridgeAttr(a), "making the managed bridge network "+sandbox.ManagedBridge, err)
	}
	return nil
}

// bridgeDrift marks a running runner stale when its managed bridge is not
// in force, so that the next plan applies the agent again and Ensure
// restores what is missing.
func (s *Service) bridgeDrift(ctx context.Context, cli client.APIClient, a agentspec.Agent, o *agentspec.Observed) error {
	if !usesBridge(a) {
		return nil
	}
	drift, err := bridge.Drift(ctx, cli, bridgeImage(a), bridge.HostResolvers())
	if err != nil {
		return stepErr(agentspec.StepRead, bridgeAttr(a), "reading the managed bridge network "+sandbox.ManagedBridge, err)
	}
	for _, d := range drift {
		o.Warnings = append(o.Warnings, agentspec.Warning{Topic: TopicBridgeDrift, Detail: d})
	}
	if len(drift) > 0 && o.RunnerStatus == agentspec.StatusRunning {
		s.log.Warn("managed bridge drift", "agent_id", a.Config.AgentID, "drift", drift)
		o.RunnerStatus = agentspec.StatusStale
	}
	return nil
}

// HostNetworkWarning says, for a host-mode agent whose tools have network
// under an external runner, that nothing contains that network: the runner
// is a process of the host, so its children reach what the host reaches,
// 127.0.0.1 included. "" otherwise (a runner container gets the managed
// bridge, usesBridge).
func HostNetworkWarning(a agentspec.Agent) string {
	fa := a.Config.FileAccess
	if a.Config.Container.Enabled || a.Deployment() != agentspec.ModeExternal || a.Meta.ThreegateNetwork != "" || !(fa.AllowNetwork || fa.Unrestricted) {
		return ""
	}
	return "An external runner is a process of this host, so the tools of this host-mode agent reach every address the host reaches, " +
		"its own 127.0.0.1 services and private and link-local addresses included. Set file_access.allow_network = false, " +
		"or let the provider run the runner in a container (runner.deployment = \"container\"), where its tools get the managed " +
		"bridge: the internet only."
}
