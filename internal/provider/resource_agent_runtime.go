package provider

import (
	"context"
	"errors"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// planRuntime refuses at plan an OCI runtime (container_mode.runtime) that
// the backend does not have, with what it has: the Docker daemon's
// runtimes, or the cluster's RuntimeClasses. Apply asks the same functions
// again (deploy.CheckRuntime, kubedeploy's RuntimeClass), so the plan
// cannot pass what apply refuses. A daemon that cannot be reached at plan
// leaves the check to apply, saying so: configurations that need no daemon
// still plan offline, and this one fails at apply if it must.
func (r *agentResource) planRuntime(ctx context.Context, svc agentspec.Backend, a agentInput, diags *diag.Diagnostics) {
	cm := a.Config.Container
	if !cm.Enabled || cm.Runtime == "" || cm.Runtime == agentspec.DefaultRuntime {
		return
	}
	at := path.Root("container_mode").AtName("runtime")
	switch err := svc.CheckRuntime(ctx, cm.Runtime); {
	case errors.Is(err, agentspec.ErrBackendUnreachable):
		diags.AddAttributeWarning(at, "Runtime Not Checked",
			"The plan could not ask whether the backend has the "+cm.Runtime+" runtime ("+err.Error()+"); apply checks it.")
	case err != nil:
		diags.AddAttributeError(at, "Runtime Not Available", err.Error()+".")
	}
}
