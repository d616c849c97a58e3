package provider

import (
	"context"
	"errors"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// admissionChecker is a backend that confines runners by admission (the
// cluster's, kubedeploy.Backend); Docker has nothing of the kind to check.
type admissionChecker interface {
	CheckAdmission(ctx context.Context) error
}

// planAdmission refuses at plan an agent on a cluster that cannot confine
// its runner (no ValidatingAdmissionPolicy API), unless the provider's
// kubernetes.runner_admission_policy is false (the backend's Check warns
// of that). Apply asks the same function again.
func (r *agentResource) planAdmission(ctx context.Context, svc agentspec.Backend, diags *diag.Diagnostics) {
	chk, ok := svc.(admissionChecker)
	if !ok {
		return
	}
	switch err := chk.CheckAdmission(ctx); {
	case errors.Is(err, agentspec.ErrBackendUnreachable):
		diags.AddWarning("Admission Not Checked", "The plan could not ask the cluster for its admission API ("+err.Error()+"); apply checks it.")
	case err != nil:
		diags.AddError("Cluster Cannot Confine Runners", err.Error()+". Upgrade the cluster, or set kubernetes.runner_admission_policy = false "+
			"in the provider block to accept runners that are not confined (the namespace is then one trust domain).")
	}
}
