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
	if cm.Runtime == "runsc" && cm.Network == "bridge" && len(cm.Networks) == 0 && a.Meta.ThreegateNetwork == "" {
		diags.AddAttributeWarning(path.Root("container_mode").AtName("network"), "Names Do Not Resolve Under gVisor",
			"With runtime = \"runsc\" a message reaches the outside by address only: gVisor's own network stack cannot reach "+
				"Docker's embedded DNS server (127.0.0.11), which answers every container on a user-defined network such as the "+
				"managed bridge, so a host name does not resolve. Use runc for an agent that needs names (docs/guides/gvisor.md).")
	}
	switch err := svc.CheckRuntime(ctx, cm.Runtime); {
	case errors.Is(err, agentspec.ErrBackendUnreachable):
		diags.AddAttributeWarning(at, "Runtime Not Checked",
			"The plan could not ask whether the backend has the "+cm.Runtime+" runtime ("+err.Error()+"); apply checks it.")
	case err != nil:
		diags.AddAttributeError(at, "Runtime Not Available", err.Error()+".")
	}
}
