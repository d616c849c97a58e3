package provider

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/docker/docker/client"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

var agentIDRegexp = regexp.MustCompile(workspace.IDPattern)

var objectAsOpts = basetypes.ObjectAsOptions{}

// validateFileAccessPlan checks file_access with the Landlock rule
// compiler's own plan-time validation, so the plan refuses exactly what the
// runner would, each error on the list entry at fault.
func validateFileAccessPlan(ctx context.Context, fa fileAccessModel, diags *diag.Diagnostics) {
	for _, l := range []types.List{fa.AllowRead, fa.AllowReadWrite, fa.Deny} {
		if l.IsUnknown() || containsUnknown(l) {
			return
		}
	}
	err := landlock.Validate(landlock.FileAccess{
		Unrestricted:   fa.Unrestricted.ValueBool(),
		AllowRead:      stringList(ctx, fa.AllowRead, diags),
		AllowReadWrite: stringList(ctx, fa.AllowReadWrite, diags),
		Deny:           stringList(ctx, fa.Deny, diags),
	})
	for _, e := range unjoin(err) {
		var fe *landlock.FieldError
		if !errors.As(e, &fe) {
			diags.AddAttributeError(path.Root("file_access"), "Invalid File Access", e.Error())
			continue
		}
		p := path.Root("file_access").AtName(fe.Field)
		summary := "Invalid File Access Path"
		if fe.Index >= 0 {
			p = p.AtListIndex(fe.Index)
		} else if fe.Field == "deny" {
			summary = "Deny With Unrestricted"
		}
		diags.AddAttributeError(p, summary, fe.Error()+".")
	}
}

func containsUnknown(l types.List) bool {
	for _, e := range l.Elements() {
		if e.IsUnknown() {
			return true
		}
	}
	return false
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// resolveThreegateRole returns the networks a role's members join and the
// env they get, read from the threegate_network with the given id.
func resolveThreegateRole(_ context.Context, _ client.APIClient, networkID, role string) ([]string, map[string]string, error) {
	return nil, nil, fmt.Errorf("threegate_network %q: role %q cannot be resolved by this build", networkID, role)
}

// hostModeSecurityOpt is what the runner container needs for Landlock host
// mode beyond the defaults.
func hostModeSecurityOpt(_ runner.Config) []string { return nil }
