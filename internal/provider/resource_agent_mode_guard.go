package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// ConfigValidators guards against the one typo that weakens isolation
// without a word: Terraform drops a misspelled key of a nested attribute
// object ("enabeld") while converting it, so such an object reaches the
// provider without enabled, whose default is host mode.
func (r *agentResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{modeStatedValidator{}}
}

// modeStatedValidator requires a container_mode object that is set at all
// to say enabled; then the mode an agent gets is always one the operator
// wrote.
type modeStatedValidator struct{}

func (modeStatedValidator) Description(context.Context) string {
	return "a container_mode object says enabled explicitly"
}

func (v modeStatedValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (modeStatedValidator) ValidateResource(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var cm types.Object
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("container_mode"), &cm)...)
	if resp.Diagnostics.HasError() || cm.IsNull() || cm.IsUnknown() {
		return
	}
	if enabled, ok := cm.Attributes()["enabled"]; ok && !enabled.IsNull() {
		return
	}
	resp.Diagnostics.AddAttributeError(path.Root("container_mode").AtName("enabled"), "Container Mode Must Say enabled",
		"container_mode is set but container_mode.enabled is not. Terraform drops a misspelled key of this object without a word "+
			"(\"enabeld = true\" arrives as nothing), and the default is host mode, so the mode must be stated: "+
			"enabled = true for a fresh hardened container per message, enabled = false for the loop on the host under "+
			"Landlock (file_access).")
}
