package topology

import (
	"context"
	"errors"
	"fmt"

	"github.com/docker/docker/client"
)

// ResolveRole returns the networks a member of role (RoleCore, RoleFetch
// or RoleToolExec) joins, the env and the DNS upstream it gets, from the
// live topology named name: the same Spec.Roles that its threegate_network
// shows.
func ResolveRole(ctx context.Context, cli client.APIClient, name, role string) (Role, error) {
	in, err := InputFromLive(ctx, cli, name)
	if err != nil {
		return Role{}, fmt.Errorf("topology %q: %w", name, err)
	}
	spec, problems := Build(in)
	if len(problems) > 0 {
		errs := make([]error, len(problems))
		for i, p := range problems {
			errs[i] = p
		}
		return Role{}, fmt.Errorf("topology %q: %w", name, errors.Join(errs...))
	}
	r, ok := spec.Roles()[role]
	if !ok || len(r.Networks) == 0 {
		return Role{}, fmt.Errorf("topology %q has no role %s", name, role)
	}
	return r, nil
}
