package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// file_access governs host mode only. A container-mode agent that does not
// set it has none: its plan and state hold null, not host mode's defaults
// (allow_network = true in every plan of an agent whose network is
// container_mode.network). Its runner config still carries the defaults,
// as before, so the config hash and the runner stay the same.

// plannedFileAccess is file_access as planned: what the configuration set
// (with its nested defaults, as planned), else host mode's defaults, or
// null in container mode, or unknown while the mode is.
func plannedFileAccess(ctx context.Context, config tfConfigGetter, planned, containerMode types.Object, diags *diag.Diagnostics) types.Object {
	var set types.Object
	diags.Append(config.GetAttribute(ctx, path.Root("file_access"), &set)...)
	if !set.IsNull() {
		return planned
	}
	if containerMode.IsUnknown() {
		return types.ObjectUnknown(fileAccessAttrTypes)
	}
	if enabled, ok := containerMode.Attributes()["enabled"].(types.Bool); ok {
		if enabled.IsUnknown() {
			return types.ObjectUnknown(fileAccessAttrTypes)
		}
		if enabled.ValueBool() {
			return types.ObjectNull(fileAccessAttrTypes)
		}
	}
	return defaultFileAccess()
}

// orDefaultFileAccess is the file_access the runner is given: null means
// the defaults.
func orDefaultFileAccess(o types.Object) types.Object {
	if o.IsNull() {
		return defaultFileAccess()
	}
	return o
}

// UpgradeState reads a state written before schema version 1, when
// file_access had a schema default and every container-mode agent held it.
// Such an agent's file_access equal to the defaults becomes null, as a
// plan of the same configuration now has it; so the first plan after the
// upgrade is empty. One set to exactly the defaults in a container-mode
// agent's configuration is indistinguishable and plans once as added back.
func (r *agentResource) UpgradeState(context.Context) map[int64]resource.StateUpgrader {
	prior := agentSchema()
	prior.Version = 0
	return map[int64]resource.StateUpgrader{
		0: {PriorSchema: &prior, StateUpgrader: upgradeAgentStateV0},
	}
}

func upgradeAgentStateV0(ctx context.Context, req resource.UpgradeStateRequest, resp *resource.UpgradeStateResponse) {
	var m agentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if cm, ok := objectAs[containerModeModel](ctx, m.ContainerMode, &resp.Diagnostics); ok && cm.Enabled.ValueBool() && m.FileAccess.Equal(defaultFileAccess()) {
		m.FileAccess = types.ObjectNull(fileAccessAttrTypes)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
