package topology

import (
	"context"
	"fmt"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// ResolveRole returns the networks a member of role (RoleCore, RoleFetch
// or RoleToolExec) joins, the env and the DNS upstream it gets, from the
// live topology named name: its record (LiveSpec) and the same Roles that
// its threegate_network shows.
func ResolveRole(ctx context.Context, cli client.APIClient, name, role string) (topospec.Role, error) {
	spec, err := LiveSpec(ctx, cli, name)
	if err != nil {
		return topospec.Role{}, fmt.Errorf("topology %q: %w", name, err)
	}
	r, ok := Roles(spec)[role]
	if !ok || len(r.Networks) == 0 {
		return topospec.Role{}, fmt.Errorf("topology %q has no role %s", name, role)
	}
	return r, nil
}
