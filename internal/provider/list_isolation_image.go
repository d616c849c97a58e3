package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/list/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
)

var _ list.ListResourceWithConfigure = (*isolationImageListResource)(nil)

// NewIsolationImageListResource is meepa_isolation_image's list resource,
// for `terraform query` (Terraform 1.14+).
func NewIsolationImageListResource() list.ListResource { return &isolationImageListResource{} }

// isolationImageListResource lists the isolation images on the provider's
// Docker daemon, by the provider's labels, each with its identity. It
// shares meepa_isolation_image's type name, Configure and image service
// (the daemon the provider builds on, with a cluster backend too).
type isolationImageListResource struct {
	isolationImageResource
}

func (r *isolationImageListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The isolation images on the Docker daemon the provider builds on (with a cluster backend too: the " +
			"images are built there and pushed), found by the provider's labels. Each comes with its identity (with a `registry`, " +
			"the name the cluster pulls) and, with `include_resource`, the state an import would give.",
		Attributes: map[string]schema.Attribute{"orphans": orphansAttribute("container images (meepa-sandbox:<hash>) no isolation " +
			"image is built on, and isolation images whose container image is gone")},
	}
}

func (r *isolationImageListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	var cfg listConfig
	var diags diag.Diagnostics
	diags.Append(req.Config.Get(ctx, &cfg)...)
	svc := r.service(ctx, &diags)
	if diags.HasError() || svc == nil {
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return
	}
	found, err := svc.List(ctx)
	if err != nil {
		addImageError(&diags, "Isolation Image List Failed", "listing the isolation images", err)
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return
	}
	items := make([]listItem, len(found))
	for i, l := range found {
		items[i] = listItem{id: l.Tag, kind: "image", orphan: l.Orphan}
	}
	stream.Results = streamList(ctx, req, cfg, items, func(tag string, orphan bool, res *list.ListResult) {
		m := isolationImageModel{IsolatedImage: types.StringValue(tag), ID: types.StringValue(tag),
			Packages: types.ListNull(types.StringType), EnvVars: types.MapNull(types.StringType)}
		if !orphan {
			r.publish(&m, &res.Diagnostics)
		}
		setIdentity(ctx, res.Identity, imageIdentity{m.IsolatedImage}, &res.Diagnostics)
		if req.IncludeResource && !orphan {
			r.include(ctx, svc, tag, m, res)
		}
	})
}

// include fills res with what an import of the image at tag reads back.
func (r *isolationImageListResource) include(ctx context.Context, svc *image.Service, tag string, m isolationImageModel, res *list.ListResult) {
	obs, err := svc.Read(ctx, image.State{Isolated: tag})
	if err != nil {
		addImageError(&res.Diagnostics, "Cannot Read Isolation Image", "read "+tag, err)
		return
	}
	m.readSpec(image.Spec{}, obs.Spec)
	m.setState(obs.State)
	r.publish(&m, &res.Diagnostics)
	m.Pull, m.KeepLocally = types.StringValue(string(image.PullMissing)), types.BoolValue(false)
	res.Diagnostics.Append(res.Resource.Set(ctx, &m)...)
	nullUnknowns(res.Resource, &res.Diagnostics)
}
