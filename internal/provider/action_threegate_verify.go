package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/action/schema"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

var _ action.ActionWithConfigure = (*threegateVerifyAction)(nil)

// NewThreegateVerifyAction is the threegate_verify action (Terraform
// 1.14+): the data source's verification, run during an apply, halting it
// when a row differs from the spec.
func NewThreegateVerifyAction() action.Action { return &threegateVerifyAction{} }

type threegateVerifyAction struct {
	data *providerData
}

func (a *threegateVerifyAction) Metadata(_ context.Context, _ action.MetadataRequest, resp *action.MetadataResponse) {
	resp.TypeName = "threegate_verify"
}

func (a *threegateVerifyAction) Schema(_ context.Context, _ action.SchemaRequest, resp *action.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Runs the same verification as the `threegate_verify` data source (probe containers or pods in each " +
			"role, and the attachment check) while an apply runs, and fails the apply with the rows that differ from the spec. " +
			"Every row shows in the CLI's output as it is judged. Trigger it after the `threegate_network` (or its members) " +
			"change (`lifecycle { action_trigger { ... } }`), or run it with `terraform apply -invoke=action.threegate_verify.<name>`. " +
			"Served by provider `meepa`: write `provider = meepa`.",
		Attributes: verifyActionAttributes(),
	}
}

func (a *threegateVerifyAction) Configure(_ context.Context, req action.ConfigureRequest, resp *action.ConfigureResponse) {
	a.data = configureData(req.ProviderData, &resp.Diagnostics)
}

func (a *threegateVerifyAction) Invoke(ctx context.Context, req action.InvokeRequest, resp *action.InvokeResponse) {
	var in threegateVerifyInputs
	resp.Diagnostics.Append(req.Config.Get(ctx, &in)...)
	if resp.Diagnostics.HasError() || !requireProviderData(a.data, "threegate_verify", &resp.Diagnostics) {
		return
	}
	name := in.Name.ValueString()
	progress(resp, fmt.Sprintf("verifying topology %s: running its probes", name))
	rep, ok := runThreegateVerify(ctx, a.data, in, "action (or its trigger)", &resp.Diagnostics)
	if !ok {
		return
	}
	for _, p := range rep.Probes {
		progress(resp, probeLine(p))
	}
	for _, v := range rep.Violations {
		progress(resp, "VIOLATION: "+v)
	}
	if !rep.OK() {
		bad := failingRows(rep)
		resp.Diagnostics.AddError("ThreeGate Isolation Differs From The Spec",
			fmt.Sprintf("Topology %q does not isolate as the spec requires (%d of %d probes failed, %d forbidden attachments):\n\n%s",
				name, len(bad.Probes), len(rep.Probes), len(bad.Violations), bad.Table()))
		return
	}
	progress(resp, fmt.Sprintf("topology %s isolates as the spec requires: %d probes passed, no forbidden attachment", name, len(rep.Probes)))
}

// probeLine is one row for the CLI's progress output.
func probeLine(p topospec.Probe) string {
	verdict := "pass"
	if !p.Pass {
		verdict = "FAIL"
	}
	return fmt.Sprintf("%s %s / %s: expected %s, observed %s", verdict, p.Role, p.What, p.Expected, p.Observed)
}
