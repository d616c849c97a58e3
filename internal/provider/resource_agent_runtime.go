package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubedeploy"
)

// planRuntime refuses at plan an OCI runtime (container_mode.runtime) that
// the backend does not have, with what it has: the Docker daemon's
// runtimes, or the cluster's RuntimeClasses. Apply asks the same functions
// again (deploy.CheckRuntime, kubedeploy's RuntimeClass), so the plan
// cannot pass what apply refuses. A daemon that cannot be reached at plan
// leaves the check to apply, saying so: configurations that need no daemon
// still plan offline, and this one fails at apply if it must.
func (r *agentResource) planRuntime(ctx context.Context, a agentInput, diags *diag.Diagnostics) {
	if r.data == nil {
		return
	}
	cm := a.Config.Container
	if !cm.Enabled || cm.Runtime == "" || cm.Runtime == agentspec.DefaultRuntime {
		return
	}
	at := path.Root("container_mode").AtName("runtime")
	if r.data.kube != nil {
		c, err := r.data.kube.Client()
		if err != nil {
			return // the plan's own cluster check says so
		}
		if _, err := kubedeploy.NewService(kubedeploy.Options{Client: c, Logger: loggerFor(ctx)}).RuntimeClass(ctx, cm.Runtime); err != nil {
			diags.AddAttributeError(at, "Runtime Not Available", err.Error()+".")
		}
		return
	}
	if cm.Runtime == "runsc" && cm.Network == "bridge" && len(cm.Networks) == 0 && a.Meta.ThreegateNetwork == "" {
		diags.AddAttributeWarning(path.Root("container_mode").AtName("network"), "Names Do Not Resolve Under gVisor",
			"With runtime = \"runsc\" a message reaches the outside by address only: gVisor's own network stack cannot reach "+
				"Docker's embedded DNS server (127.0.0.11), which answers every container on a user-defined network such as the "+
				"managed bridge, so a host name does not resolve. Use runc for an agent that needs names (docs/guides/gvisor.md).")
	}
	cli, err := r.data.docker.Client(ctx)
	if err != nil {
		diags.AddAttributeWarning(at, "Runtime Not Checked",
			"The plan could not ask the Docker daemon whether it has the "+cm.Runtime+" runtime ("+err.Error()+"); apply checks it.")
		return
	}
	if err := deploy.CheckRuntime(ctx, cli, cm.Runtime); err != nil {
		diags.AddAttributeError(at, "Runtime Not Available", err.Error()+".")
	}
}
