package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
)

// topologyService returns the topology service for one request, logging
// through tflog, or nil after adding why there is none.
func topologyService(ctx context.Context, d *providerData, typeName string, diags *diag.Diagnostics) *topology.Service {
	if !requireProviderData(d, typeName, diags) {
		return nil
	}
	cli := d.dockerClient(ctx, diags)
	if cli == nil {
		return nil
	}
	return topology.NewService(cli, loggerFor(ctx))
}
