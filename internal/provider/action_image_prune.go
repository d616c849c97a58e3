package provider

import (
	"context"
	"fmt"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/action/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
)

var (
	_ action.ActionWithConfigure      = (*imagePruneAction)(nil)
	_ action.ActionWithValidateConfig = (*imagePruneAction)(nil)
)

// NewImagePruneAction is the meepa_image_prune action (Terraform 1.14+):
// removes the provider's images no container uses, and only when told to.
func NewImagePruneAction() action.Action { return &imagePruneAction{} }

type imagePruneAction struct {
	data *providerData
}

type imagePruneModel struct {
	Keep    types.List   `tfsdk:"keep"`
	Match   types.String `tfsdk:"match"`
	Confirm types.Bool   `tfsdk:"confirm"`
}

func (a *imagePruneAction) Metadata(_ context.Context, req action.MetadataRequest, resp *action.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_image_prune"
}

func (a *imagePruneAction) Schema(_ context.Context, _ action.SchemaRequest, resp *action.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Removes the provider's images (isolation images and the `meepa-sandbox` container images under them, " +
			"found by the provider's labels on the Docker daemon it builds on) that no container uses, running or stopped, " +
			"and that `keep` does not name. A container image stays while an isolation image that stays is built on it. " +
			"Without `confirm = true` it is a dry run: it lists what it would remove and removes nothing, because an image " +
			"another configuration's state holds (or one built a moment ago and not yet started) looks the same as a leftover, " +
			"and a removed image is rebuilt only by that configuration's next apply. Each image shows in the CLI's output. " +
			"Run it with `terraform apply -invoke=action.meepa_image_prune.<name>`.",
		Attributes: map[string]schema.Attribute{
			"keep": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Images that stay: tags (`meepa_isolation_image.<name>.isolated_image` and `.image`) or image ids."},
			"match": schema.StringAttribute{Optional: true,
				MarkdownDescription: "A regular expression (RE2, checked at plan): only images with a tag it matches are removed " +
					"(untagged images then stay). Unset: every image of the provider's."},
			"confirm": schema.BoolAttribute{Optional: true,
				MarkdownDescription: "`true` removes the images; unset or `false` only lists what would be removed."},
		},
	}
}

func (a *imagePruneAction) Configure(_ context.Context, req action.ConfigureRequest, resp *action.ConfigureResponse) {
	a.data = configureData(req.ProviderData, &resp.Diagnostics)
}

func (a *imagePruneAction) ValidateConfig(ctx context.Context, req action.ValidateConfigRequest, resp *action.ValidateConfigResponse) {
	var m imagePruneModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if e := m.Match; !resp.Diagnostics.HasError() && !e.IsUnknown() && !e.IsNull() {
		if _, err := regexp.Compile(e.ValueString()); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("match"), "Invalid Regular Expression", err.Error())
		}
	}
}

func (a *imagePruneAction) Invoke(ctx context.Context, req action.InvokeRequest, resp *action.InvokeResponse) {
	var m imagePruneModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	svc := (&isolationImageResource{data: a.data}).service(ctx, &resp.Diagnostics)
	if svc == nil {
		return
	}
	opts := image.PruneOptions{DryRun: !m.Confirm.ValueBool()}
	if !m.Keep.IsNull() {
		resp.Diagnostics.Append(m.Keep.ElementsAs(ctx, &opts.Keep, false)...)
	}
	if e := m.Match.ValueString(); e != "" {
		opts.Match = regexp.MustCompile(e)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	verb := "removed"
	if opts.DryRun {
		verb = "would remove"
		progress(resp, "dry run (set confirm = true to remove): listing the provider's images no container uses")
	}
	pruned, err := svc.Prune(ctx, opts)
	var total int64
	for _, p := range pruned {
		total += p.Size
		progress(resp, fmt.Sprintf("%s %s %s (%d MB)", verb, p.Component, p.Ref, p.Size>>20))
	}
	if err != nil {
		addImageError(&resp.Diagnostics, "Image Prune Failed", "pruning the provider's images", err)
		return
	}
	progress(resp, fmt.Sprintf("%s %d images, %d MB", verb, len(pruned), total>>20))
}
