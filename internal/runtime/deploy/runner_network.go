package deploy

import (
	"context"
	"fmt"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
)

// RunnerNetwork is the network of a runner container that needs one (a
// published TCP port, a route to the model endpoint, or a host-mode agent
// with network): a bridge of the provider's own with inter-container
// traffic off. On Docker's default bridge every container of the host
// reached a runner's API on its container address, whatever the port was
// published on; here no other container does: Docker isolates bridge
// networks from each other, and enable_icc=false drops traffic between the
// runners on this one. The port published on the host's 127.0.0.1 is the
// one way in, and the way out (NAT through the host) is the default
// bridge's.
const RunnerNetwork = "meepa-runners"

const (
	optICC         = "com.docker.network.bridge.enable_icc"
	labelRunnerNet = engine.LabelPrefix + "runner-network"
)

var runnerNetMu sync.Mutex

// ensureRunnerNetwork makes RunnerNetwork when it is missing and refuses
// one of that name that lets its containers reach each other.
func ensureRunnerNetwork(ctx context.Context, cli client.APIClient) error {
	runnerNetMu.Lock()
	defer runnerNetMu.Unlock()
	in, err := cli.NetworkInspect(ctx, RunnerNetwork, network.InspectOptions{})
	if err == nil {
		return runnerNetworkProblem(in)
	}
	if !errdefs.IsNotFound(err) {
		return fmt.Errorf("network inspect %s: %w", RunnerNetwork, err)
	}
	ipv6 := false
	_, err = cli.NetworkCreate(ctx, RunnerNetwork, network.CreateOptions{
		Driver:     "bridge",
		EnableIPv6: &ipv6,
		Options:    map[string]string{optICC: "false"},
		Labels:     engine.Labels("network", map[string]string{labelRunnerNet: RunnerNetwork}),
	})
	if err != nil && !errdefs.IsConflict(err) {
		return fmt.Errorf("network create %s: %w", RunnerNetwork, err)
	}
	if in, err = cli.NetworkInspect(ctx, RunnerNetwork, network.InspectOptions{}); err != nil {
		return fmt.Errorf("network inspect %s: %w", RunnerNetwork, err)
	}
	return runnerNetworkProblem(in)
}

func runnerNetworkProblem(in network.Inspect) error {
	if in.Driver != "bridge" || in.Internal || in.Options[optICC] != "false" || in.Labels[labelRunnerNet] != RunnerNetwork {
		return fmt.Errorf("network %s exists but is not the provider's runner network (a bridge with %s=false, labelled %s); "+
			"remove it (docker network rm %s) once no container uses it, and apply again", RunnerNetwork, optICC, labelRunnerNet, RunnerNetwork)
	}
	return nil
}
