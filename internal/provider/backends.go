package provider

import (
	"context"
	"strings"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubedeploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubetopology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// topologyBackends is how a request gets the topology backend that
// Configure chose, logging through tflog under the request's context.
type topologyBackends func(ctx context.Context) topospec.Backend

// agentBackends is how a request gets the agent backend that Configure
// chose; an error only when the kubeconfig cannot be read.
type agentBackends func(ctx context.Context) (agentspec.Backend, error)

// pickBackends picks the topology and the agent backend once, when the
// provider is configured: the cluster when one is configured, else the
// Docker daemon. Neither connects before an operation needs it, so
// validation and planning work without a daemon or a cluster. Every
// resource then reads as one straight line over the backend's interface.
func (d *providerData) pickBackends() {
	if d.kube != nil {
		d.topologies = func(ctx context.Context) topospec.Backend {
			return kubetopology.NewBackend(d.kube.Client, kubetopology.Options{Logger: loggerFor(ctx)})
		}
		d.agents = func(ctx context.Context) (agentspec.Backend, error) {
			c, err := d.kube.Client()
			if err != nil {
				return nil, err
			}
			return kubedeploy.NewBackend(kubedeploy.NewService(kubedeploy.Options{
				Client: c, Version: d.version, APIServer: d.kube.apiServer, SkipAdmission: d.kube.skipAdmission, Logger: loggerFor(ctx),
			})), nil
		}
		return
	}
	o := topology.Options{Host: engine.HostOf(d.docker.opts), Local: dockerIsLocal(d)}
	dial := func(ctx context.Context) (client.APIClient, error) { return d.docker.Client(ctx) }
	d.topologies = func(ctx context.Context) topospec.Backend { return topology.NewBackend(dial, loggerFor(ctx), o) }
	d.agents = func(ctx context.Context) (agentspec.Backend, error) {
		return deploy.NewService(deploy.Options{
			StateDir:     d.stateDir,
			Version:      d.version,
			Docker:       dial,
			DockerSocket: dockerSocket(d),
			Logger:       loggerFor(ctx),
		}), nil
	}
}

// dockerSocket is the daemon's socket on this host: the provider's own unix
// docker_host, else the default.
func dockerSocket(d *providerData) string {
	if h, ok := strings.CutPrefix(engine.HostOf(d.docker.opts), "unix://"); ok {
		return h
	}
	return deploy.DefaultDockerSocket
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
