package provider

import (
	"context"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubetopology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// topologyBackends is how a request gets the topology backend that
// Configure chose, logging through tflog under the request's context.
type topologyBackends func(ctx context.Context) topospec.Backend

// newTopologyBackends picks the topology backend once, when the provider
// is configured: the cluster when one is configured, else the Docker
// daemon. Neither connects before an operation needs it, so validation
// and planning work without a daemon or a cluster.
func newTopologyBackends(d *providerData) topologyBackends {
	if d.kube != nil {
		return func(ctx context.Context) topospec.Backend {
			return kubetopology.NewBackend(d.kube.Client, kubetopology.Options{Logger: loggerFor(ctx)})
		}
	}
	o := topology.Options{Host: engine.HostOf(d.docker.opts), Local: dockerIsLocal(d)}
	dial := func(ctx context.Context) (client.APIClient, error) { return d.docker.Client(ctx) }
	return func(ctx context.Context) topospec.Backend { return topology.NewBackend(dial, loggerFor(ctx), o) }
}

// topologyBackend is the provider's topology backend for one request. An
// unconfigured provider (validation) plans as the Docker backend does and
// connects to nothing.
func topologyBackend(ctx context.Context, d *providerData) topospec.Backend {
	if d == nil || d.topologies == nil {
		return topology.NewBackend(nil, loggerFor(ctx), topology.Options{Local: true})
	}
	return d.topologies(ctx)
}
