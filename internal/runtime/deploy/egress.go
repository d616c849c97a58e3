package deploy

import (
	"context"
	"fmt"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
)

// egressFor is agentspec.EgressFor with the Docker topology's facts:
// its spec and key from the live proxy container.
func egressFor(ctx context.Context, cli client.APIClient, topo, proxyURL string, c *agentspec.Config) (*agentspec.Egress, error) {
	return agentspec.EgressFor(c, func() (agentspec.EgressTopology, error) {
		spec, err := topology.LiveSpec(ctx, cli, topo)
		if err != nil {
			return agentspec.EgressTopology{}, fmt.Errorf("topology %q: %w", topo, err)
		}
		key, err := topology.EgressKey(ctx, cli, topo)
		if err != nil {
			return agentspec.EgressTopology{}, err
		}
		return agentspec.EgressTopology{Allow: spec.Proxy.Allow, AllowPrivate: spec.Docker.AllowPrivate, Key: key, Proxy: proxyURL}, nil
	})
}
