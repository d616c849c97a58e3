package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/identityschema"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Resource identity (Terraform 1.12+): what names an object of this
// provider outside any state, so `import` blocks can take it and
// `terraform query` can hand it out. A CLI without identity support sends
// no identity; every setter below is then a no-op.

var (
	_ resource.ResourceWithIdentity = (*isolationImageResource)(nil)
	_ resource.ResourceWithIdentity = (*threegateNetworkResource)(nil)
	_ resource.ResourceWithIdentity = (*agentResource)(nil)
)

// imageIdentity names an isolation image by its tag, which its content
// hash (or its base) decides.
type imageIdentity struct {
	IsolatedImage types.String `tfsdk:"isolated_image"`
}

func (r *isolationImageResource) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	resp.IdentitySchema = identityschema.Schema{Attributes: map[string]identityschema.Attribute{
		"isolated_image": identityschema.StringAttribute{
			RequiredForImport: true,
			Description:       "The isolation image's tag (meepagateway-isolated:{version}-{base}), as the resource's isolated_image.",
		},
	}}
}

// topologyIdentity names a topology by its name on one backend.
type topologyIdentity struct {
	Name    types.String `tfsdk:"name"`
	Backend types.String `tfsdk:"backend"`
}

func (r *threegateNetworkResource) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	resp.IdentitySchema = identityschema.Schema{Attributes: map[string]identityschema.Attribute{
		"name": identityschema.StringAttribute{
			RequiredForImport: true,
			Description:       "The topology's name.",
		},
		"backend": identityschema.StringAttribute{
			OptionalForImport: true,
			Description:       "Where it runs: docker (a Docker host and its firewall) or kubernetes (a cluster namespace). On import it must be the backend the provider is configured for.",
		},
	}}
}

// agentIdentity names an agent by its id on one backend.
type agentIdentity struct {
	AgentID types.String `tfsdk:"agent_id"`
	Backend types.String `tfsdk:"backend"`
}

func (r *agentResource) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	resp.IdentitySchema = identityschema.Schema{Attributes: map[string]identityschema.Attribute{
		"agent_id": identityschema.StringAttribute{
			RequiredForImport: true,
			Description:       "The agent's id, as the resource's agent_id.",
		},
		"backend": identityschema.StringAttribute{
			OptionalForImport: true,
			Description:       "Where its runner runs: docker (a Docker host) or kubernetes (a cluster namespace). On import it must be the backend the provider is configured for.",
		},
	}}
}

// setIdentity records v as the resource's identity when the CLI keeps
// identities.
func setIdentity(ctx context.Context, id *tfsdk.ResourceIdentity, v any, diags *diag.Diagnostics) {
	if id != nil {
		diags.Append(id.Set(ctx, v)...)
	}
}

// importID is what an import names: the ID of `terraform import` or an
// import block's id, else the identity attribute at attr.
func importID(ctx context.Context, req resource.ImportStateRequest, attr string, diags *diag.Diagnostics) string {
	if req.ID != "" || req.Identity == nil {
		return req.ID
	}
	var v types.String
	diags.Append(req.Identity.GetAttribute(ctx, path.Root(attr), &v)...)
	return v.ValueString()
}

// checkIdentityBackend refuses, on the identity's backend attribute, an
// import whose identity names what on another backend than kind, the
// configured one's, before anything is read.
func checkIdentityBackend(ctx context.Context, req resource.ImportStateRequest, kind, what string, diags *diag.Diagnostics) {
	if req.ID != "" || req.Identity == nil {
		return
	}
	var backend types.String
	diags.Append(req.Identity.GetAttribute(ctx, path.Root("backend"), &backend)...)
	if b := backend.ValueString(); b != "" && b != kind {
		diags.AddAttributeError(path.Root("backend"), "Wrong Backend",
			fmt.Sprintf("the identity names %s on %s, and this provider is configured for %s; import it with a provider configured for %s.", what, b, kind, b))
	}
}
