package provider

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
)

var execLookPath = exec.LookPath

// addRuntimeError is the shared wording for a failed operation on a real
// object: what was attempted, on what, and the underlying error.
func addRuntimeError(diags *diag.Diagnostics, summary, what string, err error) {
	diags.AddError(summary, fmt.Sprintf("%s: %v", what, err))
}

// addErrors is the one way a backend's error becomes diagnostics. Each
// error joined in err that says where it is at fault (a *fault.FieldError,
// a *fault.StepError with a field) goes on that attribute; one that names
// no field goes on the resource. Its title is its own where it has one,
// else summary; its detail is its own text, after "what: " when what is
// given and the error does not say what it worked on. describe, where a
// caller has its own words for some field errors, gives their title and
// detail instead.
func addErrors(diags *diag.Diagnostics, err error, summary, what string, describe func(fe *fault.FieldError) (summary, detail string)) {
	for _, e := range unjoin(err) {
		b := blameOf(e)
		if b.title == "" {
			b.title = summary
		}
		var fe *fault.FieldError
		if describe != nil && errors.As(e, &fe) {
			b.title, b.detail = describe(fe)
		}
		switch {
		case b.at != nil:
			diags.AddAttributeError(*b.at, b.title, b.detail)
		case what != "" && !b.own:
			diags.AddError(b.title, what+": "+b.detail)
		default:
			diags.AddError(b.title, b.detail)
		}
	}
}

// blame is where an error is at fault and what it says: its attribute
// (nil: the resource), its title ("": the caller's) and its detail; own
// when the error already says what it worked on.
type blame struct {
	at            *path.Path
	title, detail string
	own           bool
}

// blameOf reads what a runtime error says of itself. A field error's
// detail starts with its attribute's path: Terraform points at the whole
// block for an error inside a nested attribute, so the text names it.
func blameOf(e error) blame {
	var (
		fe *fault.FieldError
		se *fault.StepError
	)
	at := func(field string, index int, key string) *path.Path {
		if field == "" {
			return nil
		}
		p := fieldPath(field, index, key)
		return &p
	}
	switch {
	case errors.As(e, &se):
		b := blame{at: at(se.Field, -1, ""), title: se.Summary, detail: stepDetail(se), own: true}
		if b.title == "" {
			b.title = stepSummaries[se.Step]
		}
		return b
	case errors.As(e, &fe):
		return blame{at: at(fe.Field, fe.Index, fe.Key), title: fe.Summary, detail: fe.Error()}
	}
	return blame{detail: e.Error()}
}

// schemaFields are the fields whose attribute sits elsewhere in the
// schema than in the runner's config file.
var schemaFields = map[string]string{"max_steps": "llm.max_steps", "listen": "runner.listen"}

// fieldPath is the attribute a field's dotted path ("runner.listen") names,
// at a list index (>= 0) or a map key (not "").
func fieldPath(field string, index int, key string) path.Path {
	if f, ok := schemaFields[field]; ok {
		field = f
	}
	parts := strings.Split(field, ".")
	p := path.Root(parts[0])
	for _, name := range parts[1:] {
		p = p.AtName(name)
	}
	switch {
	case index >= 0:
		p = p.AtListIndex(index)
	case key != "":
		p = p.AtMapKey(key)
	}
	return p
}

// requireProviderData reports whether Configure handed the construct its
// provider data. Terraform configures the provider before any CRUD call, so
// its absence is a bug; it is reported instead of silently doing nothing
// (a Delete that did nothing would drop real objects from state).
func requireProviderData(d *providerData, typeName string, diags *diag.Diagnostics) bool {
	if d != nil {
		return true
	}
	diags.AddError("Provider Not Configured",
		typeName+" was called before the meepa provider was configured. This is a bug in the provider; please report it.")
	return false
}

// addUnknownAtApplyError reports an input still unknown at apply, which
// ModifyPlan and Terraform's own checks should have made impossible.
func addUnknownAtApplyError(diags *diag.Diagnostics, typeName string) {
	diags.AddError("Unknown Values At Apply",
		typeName+" needs every input known at apply, but some are still unknown. This is a bug in the provider; please report it.")
}

// codeList renders accepted values for a description (`a`, `b`), so the
// documentation is built from the same list as the validator.
func codeList[T ~string](vals []T) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = "`" + string(v) + "`"
	}
	return strings.Join(q, ", ")
}

// stringCheck turns a runtime check into a plan-time validator with an
// attribute-scoped error; its description is the one text the docs show.
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
		resp.Diagnostics.AddAttributeError(req.Path, v.summary, strings.TrimSuffix(err.Error(), ".")+".")
	}
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
