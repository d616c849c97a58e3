package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/list/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

var _ list.ListResourceWithConfigure = (*topologyListResource)(nil)

// NewTopologyListResource is threegate_network's list resource, for
// `terraform query` (Terraform 1.14+).
func NewTopologyListResource() list.ListResource { return &topologyListResource{} }

// topologyListResource lists the topologies the configured backend holds,
// by the provider's own labels, each with its identity. It shares
// threegate_network's type name and Configure.
type topologyListResource struct {
	threegateNetworkResource
}

func (r *topologyListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The ThreeGate topologies the provider's backend holds: on Docker, every topology whose proxy container " +
			"the daemon runs; on a cluster, every one whose proxy Deployment is in the namespace. Each comes with its identity and, " +
			"with `include_resource`, the state an import would give.",
		Attributes: map[string]schema.Attribute{"orphans": orphansAttribute("networks, a firewall guard container or iptables chains (Docker) or NetworkPolicies (cluster) whose proxy is gone")},
	}
}

func (r *topologyListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	var cfg listConfig
	var diags diag.Diagnostics
	diags.Append(req.Config.Get(ctx, &cfg)...)
	if diags.HasError() || !requireProviderData(r.data, "threegate_network", &diags) {
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return
	}
	b := topologyBackend(ctx, r.data)
	found, err := b.List(ctx)
	if err != nil {
		addFailure(&diags, err, "ThreeGate List Failed", "listing the topologies")
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return
	}
	items := make([]listItem, len(found))
	for i, l := range found {
		items[i] = listItem{id: l.Name, kind: "topology", orphan: l.Orphan}
	}
	stream.Results = streamList(ctx, req, cfg, items, func(name string, orphan bool, res *list.ListResult) {
		r.setIdentity(ctx, res.Identity, types.StringValue(name), &res.Diagnostics)
		if req.IncludeResource && !orphan {
			includeTopology(ctx, b, name, res)
		}
	})
}

// includeTopology fills res with what an import of the topology called
// name reads back: its inputs and what they decide; what only apply
// would learn is null.
func includeTopology(ctx context.Context, b topospec.Backend, name string, res *list.ListResult) {
	spec, err := b.Import(ctx, name)
	if err != nil {
		addFailure(&res.Diagnostics, err, "ThreeGate Import Failed", "reading topology "+name)
		return
	}
	m := threegateNetworkModel{Name: types.StringValue(name)}
	res.Diagnostics.Append(m.fromSpec(ctx, spec, b.Planned(spec))...)
	res.Diagnostics.Append(res.Resource.Set(ctx, &m)...)
	nullUnknowns(res.Resource, &res.Diagnostics)
}
