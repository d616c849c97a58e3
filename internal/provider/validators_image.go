package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
)

// stringCheck turns a runtime check into a plan-time validator with an
// attribute-scoped error.
type stringCheck struct {
	summary string
	desc    string
	check   func(string) error
}

func (v stringCheck) Description(context.Context) string             { return v.desc }
func (v stringCheck) MarkdownDescription(ctx context.Context) string { return v.desc }

func (v stringCheck) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := v.check(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, v.summary, err.Error()+".")
	}
}

// packageName accepts what some package manager accepts as one argument and
// nothing a shell would interpret. The per-manager rules are applied in
// ValidateConfig, where package_manager is known.
func packageName() validator.String {
	return stringCheck{
		summary: "Invalid Package Name",
		desc:    "each must be " + image.PackagePatternDescription,
		check:   func(s string) error { return image.ValidatePackage(image.ManagerAuto, s) },
	}
}

func envVarName() validator.String {
	return stringCheck{
		summary: "Invalid Environment Variable Name",
		desc:    "names match `^[A-Za-z_][A-Za-z0-9_]*$`; HOME and TMPDIR are reserved",
		check:   image.ValidateEnvName,
	}
}

func envVarValue() validator.String {
	return stringCheck{
		summary: "Invalid Environment Variable Value",
		desc:    "values hold no newlines or other control characters (tab is allowed)",
		check:   image.ValidateEnvValue,
	}
}

func imageReference() validator.String {
	return stringCheck{
		summary: "Invalid Image Reference",
		desc:    "a Docker image reference",
		check: func(s string) error {
			if s == "" {
				return fmt.Errorf("the image reference is empty")
			}
			return image.ValidateImageRef(s)
		},
	}
}

// oneOfText renders a list of accepted values for a description, so the
// documentation is built from the same list as the validator.
func oneOfText[T ~string](vals []T) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = "`" + string(v) + "`"
	}
	return strings.Join(q, ", ")
}

func stringsOf[T ~string](vals []T) []string {
	s := make([]string, len(vals))
	for i, v := range vals {
		s[i] = string(v)
	}
	return s
}
