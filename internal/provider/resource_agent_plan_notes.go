package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
)

// warnSoulSeedOnly says at plan that a changed soul will not reach an
// existing workspace. Terraform must plan the configured value for an
// attribute the configuration sets, so the attribute cannot plan "no
// change"; and writing SOUL.md without manage_soul would overwrite what
// the agent wrote there, which soul promises never to do. What is left is
// to say it plainly where the operator looks: on soul, in the plan.
// memory is the same: MEMORY.md is the agent's once made, with no manage_
// switch, so its change only seeds.
func warnSoulSeedOnly(plan, state agentModel, diags *diag.Diagnostics) {
	ws := state.WorkspacePath.ValueString()
	if state.WorkspacePath.IsNull() || ws == "" {
		return
	}
	if !plan.ManageSoul.IsUnknown() && !plan.ManageSoul.ValueBool() && !plan.Soul.IsUnknown() && !plan.Soul.Equal(state.Soul) {
		diags.AddAttributeWarning(path.Root("soul"), "Soul Only Seeds A New Workspace",
			fmt.Sprintf("soul changes, but manage_soul is false and the workspace %s exists, so apply will not write SOUL.md: the agent keeps "+
				"the text it has (and its own edits). The new text is kept as the seed for a workspace made again. To write it now, "+
				"and keep SOUL.md equal to soul from then on, set manage_soul = true.", ws))
	}
	if !plan.Memory.IsUnknown() && !plan.Memory.Equal(state.Memory) {
		diags.AddAttributeWarning(path.Root("memory"), "Memory Only Seeds A New Workspace",
			fmt.Sprintf("memory changes, but the workspace %s exists, so apply will not write MEMORY.md: it belongs to the agent once "+
				"made. The new text is kept as the seed for a workspace made again; to change the agent's memory now, edit MEMORY.md "+
				"in the workspace.", ws))
	}
}

// warnRunnerReplaced says at plan that apply replaces the agent's runner,
// and why: Terraform shows the resource as updated in place, and only
// runner_container_id's "known after apply" would tell that a running
// service stops.
//
// in is the plan's agent (agentOf), checkable when its inputs but the
// secret values are known.
func warnRunnerReplaced(ctx context.Context, svc agentspec.Backend, in agentInput, checkable bool, plan, state agentModel, diags *diag.Diagnostics) {
	var why []string
	if !plan.RunnerStatus.IsUnknown() && !plan.RunnerStatus.Equal(state.RunnerStatus) {
		why = append(why, statusReason(state.RunnerStatus.ValueString()))
	}
	if !plan.WorkspacePath.Equal(state.WorkspacePath) {
		why = append(why, "its workspace is made again (the runner holds the old one's mount)")
	}
	switch {
	case tokenRotates(plan, state):
		why = append(why, fmt.Sprintf("token_version moved from %d to %d: a new token, which only the new runner accepts",
			state.TokenVersion.ValueInt64(), plan.TokenVersion.ValueInt64()))
	case plan.ConfigHash.IsUnknown():
		why = append(why, "its new config cannot be hashed before apply (a value is known only at apply, or the runner's hash key is gone)")
	case !plan.ConfigHash.Equal(state.ConfigHash):
		var d diag.Diagnostics
		old := agentOf(ctx, state, "", &d)
		// State holds no secrets: neither side's are compared.
		new := in.Agent
		new.Config.Secrets = nil
		changed := []string(nil)
		if old.known() && checkable && !d.HasError() {
			changed = deploy.ChangedInputs(old.Agent, new)
		}
		if len(changed) == 0 {
			why = append(why, "a write-only input of its config changed (llm.api_key or a secrets value, which no plan can show)")
		} else {
			why = append(why, "these settings of its config changed: "+strings.Join(changed, ", "))
		}
		if slices.Contains(changed, "container_mode.image") && new.Config.Container.Enabled && new.Meta.RunnerImage == "" {
			why = append(why, "the runner runs from container_mode.image itself, and a runner kept on the old image would hold it on the "+
				"daemon. With an image of its own (runner.image), a new container_mode.image reaches the runner by a reload, "+
				"and its next message runs in the new image without a restart")
		}
	}
	if len(why) == 0 {
		return
	}
	runner := svc.RunnerName(plan.AgentID.ValueString())
	diags.AddWarning("Runner Will Be Replaced",
		fmt.Sprintf("Apply replaces %s: it finishes the message it is running, then stops, and the agent takes no message until "+
			"the new runner is healthy. Why: %s.", runner, strings.Join(why, "; ")))
}

// statusReason explains a runner status Read found.
func statusReason(status string) string {
	switch status {
	case agentspec.StatusMissing:
		return "its container is gone"
	case agentspec.StatusStopped:
		return "it is not running"
	case agentspec.StatusRestarting:
		return "it keeps restarting"
	case agentspec.StatusStale:
		return "it runs another config than its config file holds, or another build of agent-runner than this provider " +
			"(as after a provider upgrade: a release that adds to the runner's config, as llm_limits did, replaces every runner once)"
	}
	return "Read found it " + status
}
