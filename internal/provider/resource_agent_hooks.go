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

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
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

// threegateRoleNames maps meepa_agent's role names onto the topology's.
var threegateRoleNames = map[string]string{
	"core": topology.RoleCore, "fetch": topology.RoleFetch, "tool_exec": topology.RoleToolExec,
}

// resolveThreegateRole returns the networks a role's members join and the
// env they get, from the live threegate_network whose id (its name) is
// given.
func resolveThreegateRole(ctx context.Context, cli client.APIClient, networkID, role string) ([]string, map[string]string, error) {
	name, ok := threegateRoleNames[role]
	if !ok {
		return nil, nil, fmt.Errorf("unknown role %q", role)
	}
	nets, env, err := topology.ResolveRole(ctx, cli, networkID, name)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (apply the threegate_network first, and give its id)", err)
	}
	return nets, env, nil
}
