package provider

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

var execLookPath = exec.LookPath

// addRuntimeError is the shared wording for a failed operation on a real
// object: what was attempted, on what, and the underlying error.
func addRuntimeError(diags *diag.Diagnostics, summary, what string, err error) {
	diags.AddError(summary, fmt.Sprintf("%s: %v", what, err))
}

// addErrors is the one way a backend's error becomes diagnostics. Each
// error joined in err that says where it is at fault (an
// *agentspec.FieldError, an *agentspec.StepError with a field, a
// topospec.Problem, a *topospec.Failure with a field) goes on that
// attribute; one that names no field goes on the resource. Its title is
// its own where it has one, else summary; its detail is its own text,
// after "what: " when what is given and the error names no field. describe,
// where a caller has its own words for some field errors, gives their
// title and detail instead.
func addErrors(diags *diag.Diagnostics, err error, summary, what string, describe func(fe *agentspec.FieldError) (summary, detail string)) {
	for _, e := range unjoin(err) {
		f := faultOf(e)
		if f.title == "" {
			f.title = summary
		}
		var fe *agentspec.FieldError
		if describe != nil && errors.As(e, &fe) {
			f.title, f.detail = describe(fe)
		}
		switch {
		case f.at != nil:
			diags.AddAttributeError(*f.at, f.title, f.detail)
		case what != "" && !f.own:
			diags.AddError(f.title, what+": "+f.detail)
		default:
			diags.AddError(f.title, f.detail)
		}
	}
}

// fault is where an error is at fault and what it says: its attribute
// (nil: the resource), its title ("": the caller's) and its detail; own
// when the error already says what it worked on.
type fault struct {
	at            *path.Path
	title, detail string
	own           bool
}

// faultOf reads what each backend's error type says of itself.
func faultOf(e error) fault {
	var (
		fe *agentspec.FieldError
		se *agentspec.StepError
		tf *topospec.Failure
		tp topospec.Problem
	)
	at := func(field string, index int, key string) *path.Path {
		if field == "" {
			return nil
		}
		p := fieldPath(field, index, key)
		return &p
	}
	switch {
	case errors.As(e, &tp):
		f := fault{at: at(joinField(tp.Field, tp.Sub), tp.Index, ""), title: tp.Summary, detail: tp.Detail}
		if tp.Sub != "" {
			// Terraform points at the whole resource block for errors
			// inside a nested attribute, so the text names the attribute.
			f.detail = f.at.String() + ": " + f.detail
		}
		return f
	case errors.As(e, &tf):
		f := fault{at: at(joinField(tf.Field, tf.Sub), -1, ""), title: tf.Summary, detail: tf.Err.Error(), own: true}
		if f.at == nil {
			f.detail = tf.What + ": " + f.detail
		}
		return f
	case errors.As(e, &se):
		return fault{at: at(stepFields[se.Field], -1, ""), title: stepSummaries[se.Step], detail: stepDetail(se), own: true}
	case errors.As(e, &fe):
		return fault{at: at(fe.Field, fe.Index, fe.Key), title: fe.Summary, detail: fe.Error()}
	}
	return fault{detail: e.Error()}
}

// joinField is a field and its sub-field as one dotted path.
func joinField(field, sub string) string {
	if sub == "" {
		return field
	}
	return field + "." + sub
}

// schemaFields are the fields whose attribute sits elsewhere in the
// schema than in the runner's config file.
var schemaFields = map[string]string{"max_steps": "llm.max_steps"}

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
