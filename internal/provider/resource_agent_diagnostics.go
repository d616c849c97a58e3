package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubedeploy"
)

// stepSummaries title the agent service's errors by the step that failed.
var stepSummaries = map[string]string{
	agentspec.StepToken:           "Token Generation Failed",
	agentspec.StepListen:          "Invalid Listen Address",
	agentspec.StepDocker:          "Docker Daemon Unreachable",
	agentspec.StepRuntime:         "Runtime Not Available",
	agentspec.StepThreegate:       "ThreeGate Role Not Resolved",
	agentspec.StepWorkspace:       "Workspace Failed",
	agentspec.StepFiles:           "Runner Files Failed",
	agentspec.StepConfig:          "Runner Config Failed",
	agentspec.StepDeploy:          "Runner Deploy Failed",
	agentspec.StepHealth:          "Runner Unhealthy",
	agentspec.StepRemove:          "Runner Remove Failed",
	agentspec.StepRemoveFiles:     "Runner Files Remove Failed",
	agentspec.StepRead:            "Runner Read Failed",
	agentspec.StepReadWorkspace:   "Workspace Read Failed",
	agentspec.StepRemoveWorkspace: "Workspace Remove Failed",
	agentspec.StepImport:          "Agent Not Found",
	agentspec.StepAsk:             "ThreeGate Ask Target Invalid",
	agentspec.StepList:            "Agent List Failed",
	agentspec.StepSend:            "Agent Message Failed",
}

// warningSummaries title the service's warnings.
var warningSummaries = map[string]string{
	"workspace ownership":        "Workspace Ownership",
	"workspace recreated":        "Workspace Recreated",
	deploy.TopicVersionDrift:     "Runner Version Drift",
	deploy.TopicImageDrift:       "Runner Image Drift",
	deploy.TopicBridgeDrift:      "Managed Bridge Network Drift",
	kubedeploy.TopicObjectDrift:  "Kubernetes Object Drift",
	kubedeploy.TopicPodSecurity:  "Namespace Without Restricted Pod Security",
	kubedeploy.TopicAdmissionOff: "Runners Not Confined By Admission",
	deploy.TopicExpandedDeny:     "Deny Inside Allow Is Expanded",
	deploy.TopicHostNetwork:      "Host-Mode Network Not Contained",
	deploy.TopicRunscNames:       "Names Do Not Resolve Under gVisor",
}

// addWarnings adds the agent backend's warnings: on the attribute of the
// setting each concerns, else on the resource.
func addWarnings(diags *diag.Diagnostics, ws []agentspec.Warning) {
	for _, w := range ws {
		summary := warningSummaries[w.Topic]
		if summary == "" {
			summary = w.Topic
		}
		if w.Field == "" {
			diags.AddWarning(summary, w.Detail)
			continue
		}
		diags.AddAttributeWarning(fieldPath(w.Field, -1, ""), summary, w.Detail)
	}
}

// addServiceError adds the agent backend's error (one step's, or a step's
// and its rollback's, joined).
func (r *agentResource) addServiceError(diags *diag.Diagnostics, err error) {
	addErrors(diags, err, "Agent Operation Failed", "", nil)
}

// stepDetail is a failed step's text, with what to do for the steps an
// operator can mend.
func stepDetail(se *fault.StepError) string {
	switch se.Step {
	case agentspec.StepDocker:
		return fmt.Sprintf("The provider could not reach the Docker daemon: %v\n\n"+
			"Start the daemon, or point the provider's docker_host (or DOCKER_HOST) at one that runs.", se.Err)
	case agentspec.StepImport:
		return se.Err.Error() + ". Import works for agents this provider (with this state_dir) made."
	case agentspec.StepListen:
		return se.Err.Error()
	}
	return se.Error()
}

// priorOf is what the state recorded of the last apply; nil for none.
func priorOf(ctx context.Context, m *agentModel) *agentspec.Prior {
	if m == nil {
		return nil
	}
	p := &agentspec.Prior{
		RunnerStatus:      m.RunnerStatus.ValueString(),
		RunnerContainerID: m.RunnerContainerID.ValueString(),
		Reported:          agentspec.Reported{LandlockABI: reportedOf(m.LandlockABI), AgentUID: reportedOf(m.AgentUID)},
		// A state without a readable runner block may have left one.
		Deployment: agentspec.ModeContainer,
	}
	var diags diag.Diagnostics
	if rn, ok := objectAs[runnerModel](ctx, m.Runner, &diags); ok {
		p.Deployment = rn.Deployment.ValueString()
	}
	return p
}

// reportedValues are what a runner reported, in state: null for what it
// did not.
func reportedValues(r agentspec.Reported) (abi, uid types.Int64) {
	value := func(v int64) types.Int64 {
		if v == agentspec.Unreported {
			return types.Int64Null()
		}
		return types.Int64Value(v)
	}
	return value(r.LandlockABI), value(r.AgentUID)
}

// reportedOf is a reported value from state, Unreported when null or unknown.
func reportedOf(v types.Int64) int64 {
	if v.IsNull() || v.IsUnknown() {
		return agentspec.Unreported
	}
	return v.ValueInt64()
}
