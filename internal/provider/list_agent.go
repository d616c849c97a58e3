package provider

import (
	"context"
	"iter"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/list/schema"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

var _ list.ListResourceWithConfigure = (*agentListResource)(nil)

// NewAgentListResource is meepa_agent's list resource, for `terraform
// query` (Terraform 1.14+).
func NewAgentListResource() list.ListResource { return &agentListResource{} }

// agentListResource lists the agents the configured backend holds, by the
// provider's own labels and files, each with its identity, so an operator
// can find what runs and import it (terraform query
// -generate-config-out). It shares meepa_agent's type name, Configure and
// error wording.
type agentListResource struct {
	agentResource
}

// listConfig is a list block's config, the same for every list resource.
type listConfig struct {
	Orphans types.Bool `tfsdk:"orphans"`
}

// orphansAttribute is the list config's orphans switch; left names what
// an orphan of the type is.
func orphansAttribute(left string) schema.Attribute {
	return schema.BoolAttribute{
		Optional: true,
		MarkdownDescription: "List instead what the provider left that nothing can import: " + left +
			". Each result's display name says what is left and how to remove it.",
	}
}

// listItem is one object a list resource found: its id and kind, which
// make its display name, and for an orphan what is left of it and how to
// remove that.
type listItem struct {
	id, kind, orphan string
	// state, when set, follows the name in parentheses.
	state string
}

// streamList streams the items the list block asked for (the importable
// ones, or with orphans = true the orphans, which say what they are in
// their display name); fill sets an item's identity and, when asked and it
// is not an orphan, its resource.
func streamList(ctx context.Context, req list.ListRequest, cfg listConfig, items []listItem, fill func(id string, orphan bool, res *list.ListResult)) iter.Seq[list.ListResult] {
	orphans := cfg.Orphans.ValueBool()
	return func(push func(list.ListResult) bool) {
		for _, it := range items {
			if (it.orphan != "") != orphans {
				continue
			}
			res := req.NewListResult(ctx)
			res.DisplayName = it.kind + " " + it.id
			if it.state != "" {
				res.DisplayName += " (" + it.state + ")"
			}
			if it.orphan != "" {
				res.DisplayName = "orphan " + it.kind + " " + it.id + ": " + it.orphan
			}
			fill(it.id, it.orphan != "", &res)
			if !push(res) {
				return
			}
		}
	}
}

// nullUnknowns turns what is unknown in a listed resource into null: a
// list result is what exists now, and what only apply would learn is not.
func nullUnknowns(r *tfsdk.Resource, diags *diag.Diagnostics) {
	raw, err := tftypes.Transform(r.Raw, func(_ *tftypes.AttributePath, v tftypes.Value) (tftypes.Value, error) {
		if !v.IsKnown() {
			return tftypes.NewValue(v.Type(), nil), nil
		}
		return v, nil
	})
	if err != nil {
		diags.AddError("Listed Resource Not Built", err.Error())
		return
	}
	r.Raw = raw
}

func (r *agentListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The agents the provider's backend holds: on Docker, every agent with a runner config under the provider's " +
			"`state_dir`; on a cluster, every agent with its config Secret in the namespace. Each comes with its identity and, " +
			"with `include_resource`, the state an import would start from.",
		Attributes: map[string]schema.Attribute{"orphans": orphansAttribute("a runner container (Docker) or Deployment (cluster) whose config is gone")},
	}
}

func (r *agentListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	var cfg listConfig
	var diags diag.Diagnostics
	diags.Append(req.Config.Get(ctx, &cfg)...)
	if diags.HasError() || !requireProviderData(r.data, "meepa_agent", &diags) {
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return
	}
	svc, err := r.service(ctx)
	var found []agentspec.Listed
	if err == nil {
		found, err = svc.List(ctx)
	}
	if err != nil {
		r.addServiceError(&diags, err)
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return
	}
	items := make([]listItem, len(found))
	for i, l := range found {
		items[i] = listItem{id: l.ID, kind: "agent", state: "runner " + l.Status, orphan: l.Orphan}
	}
	stream.Results = streamList(ctx, req, cfg, items, func(id string, orphan bool, res *list.ListResult) {
		r.setIdentity(ctx, res.Identity, types.StringValue(id), &res.Diagnostics)
		if req.IncludeResource && !orphan {
			r.includeResource(ctx, svc, id, res)
		}
	})
}

// includeResource fills res with the state an import of id starts from.
func (r *agentListResource) includeResource(ctx context.Context, svc agentspec.Backend, id string, res *list.ListResult) {
	imp, err := svc.Import(ctx, id)
	if err != nil {
		r.addServiceError(&res.Diagnostics, err)
		return
	}
	m := importedModel(imp)
	res.Diagnostics.Append(res.Resource.Set(ctx, &m)...)
	nullUnknowns(res.Resource, &res.Diagnostics)
}
