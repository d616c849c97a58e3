package provider

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"os/exec"
)

var execLookPath = exec.LookPath

// addRuntimeError is the shared wording for a failed operation on a real
// object: what was attempted, on what, and the underlying error.
func addRuntimeError(diags *diag.Diagnostics, summary, what string, err error) {
	diags.AddError(summary, fmt.Sprintf("%s: %v", what, err))
}

// absolutePath validates that a string is an absolute, clean path.
func absolutePath() validator.String { return absolutePathValidator{} }

type absolutePathValidator struct{}

func (absolutePathValidator) Description(context.Context) string {
	return "must be an absolute, clean path (no `..`, no trailing slash)"
}

func (v absolutePathValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (absolutePathValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	p := req.ConfigValue.ValueString()
	switch {
	case !filepath.IsAbs(p):
		resp.Diagnostics.AddAttributeError(req.Path, "Relative Path",
			fmt.Sprintf("%q is not absolute; give a path that starts with /.", p))
	case filepath.Clean(p) != p:
		resp.Diagnostics.AddAttributeError(req.Path, "Unclean Path",
			fmt.Sprintf("%q is not in clean form; write it as %q.", p, filepath.Clean(p)))
	}
}
