package provider

import (
	"context"
	"fmt"
	"regexp"

	"github.com/docker/docker/client"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

var agentIDRegexp = regexp.MustCompile(workspace.IDPattern)

var objectAsOpts = basetypes.ObjectAsOptions{}

// validateFileAccessPlan checks file_access rules that Landlock cannot
// express (hooked to the Landlock rule compiler once it lands).
func validateFileAccessPlan(_ context.Context, _ fileAccessModel, _ *diag.Diagnostics) {}

// resolveThreegateRole returns the networks a role's members join and the
// env they get, read from the threegate_network with the given id.
func resolveThreegateRole(_ context.Context, _ client.APIClient, networkID, role string) ([]string, map[string]string, error) {
	return nil, nil, fmt.Errorf("threegate_network %q: role %q cannot be resolved by this build", networkID, role)
}

// hostModeSecurityOpt is what the runner container needs for Landlock host
// mode beyond the defaults.
func hostModeSecurityOpt(_ runner.Config) []string { return nil }
