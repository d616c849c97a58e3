package provider

import (
	"context"
	"errors"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// threegateAsk reads threegate.ask when it and the role are known.
func threegateAsk(ctx context.Context, m agentModel, diags *diag.Diagnostics) (tg threegateModel, ids []string, ok bool) {
	if m.Threegate.IsNull() || m.Threegate.IsUnknown() {
		return tg, nil, false
	}
	diags.Append(m.Threegate.As(ctx, &tg, objectAsOpts)...)
	if diags.HasError() || tg.Ask.IsNull() || tg.Ask.IsUnknown() || tg.Role.IsUnknown() {
		return tg, nil, false
	}
	var raw []types.String
	diags.Append(tg.Ask.ElementsAs(ctx, &raw, false)...)
	for _, v := range raw {
		if v.IsUnknown() {
			return tg, nil, false
		}
		ids = append(ids, v.ValueString())
	}
	return tg, ids, true
}

// validateThreegateAsk: only a core agent asks, and asks agents by valid,
// distinct ids other than its own.
func validateThreegateAsk(ctx context.Context, m agentModel, diags *diag.Diagnostics) {
	tg, ids, ok := threegateAsk(ctx, m, diags)
	if !ok || len(ids) == 0 {
		return
	}
	p := path.Root("threegate").AtName("ask")
	if tg.Role.ValueString() != "core" {
		diags.AddAttributeError(p, "Ask Without Role Core",
			"threegate.ask: only a core agent may ask other agents (depth one: fetch and tool_exec agents answer, they never ask); this one's role is "+tg.Role.ValueString()+".")
		return
	}
	seen := map[string]bool{}
	for i, id := range ids {
		switch {
		case !workspace.ValidID(id):
			diags.AddAttributeError(p.AtListIndex(i), "Invalid Agent ID", "threegate.ask: "+id+" is not an agent_id.")
		case !m.AgentID.IsUnknown() && id == m.AgentID.ValueString():
			diags.AddAttributeError(p.AtListIndex(i), "Agent Asks Itself", "threegate.ask: an agent cannot ask itself.")
		case seen[id]:
			diags.AddAttributeError(p.AtListIndex(i), "Duplicate Ask Target", "threegate.ask: "+id+" is listed twice.")
		}
		seen[id] = true
	}
}

// askResolver checks ask targets where the backend keeps agents: the
// state directory on Docker, the agents' Secrets on a cluster.
type askResolver func(ctx context.Context, topology string, ids []string) error

// planThreegateAsk checks, at plan, the ask targets already deployed: same
// topology, role fetch or tool_exec. Targets applied in the same run are
// checked at apply.
func planThreegateAsk(ctx context.Context, resolve askResolver, m agentModel, diags *diag.Diagnostics) {
	tg, ids, ok := threegateAsk(ctx, m, diags)
	if !ok || len(ids) == 0 || tg.Network.IsUnknown() || tg.Role.ValueString() != "core" {
		return
	}
	err := resolve(ctx, tg.Network.ValueString(), ids)
	var hard []error
	for _, e := range unjoin(err) {
		if !errors.Is(e, agentspec.ErrAskTargetNotDeployed) {
			hard = append(hard, e)
		}
	}
	if len(hard) > 0 {
		diags.AddAttributeError(path.Root("threegate").AtName("ask"), "ThreeGate Ask Target Invalid", errors.Join(hard...).Error())
	}
}

// planRunAsk checks the asks between this agent and the agents planned
// before it in the same run (planRun.agent), which the targets' runner
// files cannot show yet.
func planRunAsk(ctx context.Context, run *planRun, m agentModel, diags *diag.Diagnostics) {
	if m.AgentID.IsUnknown() || m.Threegate.IsNull() || m.Threegate.IsUnknown() {
		return
	}
	var tg threegateModel
	diags.Append(m.Threegate.As(ctx, &tg, objectAsOpts)...)
	if diags.HasError() || tg.Network.IsUnknown() || tg.Role.IsUnknown() {
		return
	}
	_, ids, _ := threegateAsk(ctx, m, diags)
	asks, askedBy := run.agent(m.AgentID.ValueString(), plannedAgent{topology: tg.Network.ValueString(), role: tg.Role.ValueString(), ask: ids})
	if len(asks) > 0 {
		diags.AddAttributeError(path.Root("threegate").AtName("ask"), "ThreeGate Ask Target Invalid", strings.Join(asks, "; "))
	}
	if len(askedBy) > 0 {
		diags.AddAttributeError(path.Root("threegate"), "ThreeGate Ask Target Invalid", "threegate: "+strings.Join(askedBy, "; "))
	}
}
