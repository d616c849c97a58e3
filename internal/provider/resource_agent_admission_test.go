package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubedeploy"
)

type admissionStub struct {
	agentspec.Backend
	err error
}

func (s admissionStub) CheckAdmission(context.Context) error { return s.err }

// A cluster without the admission API is refused at plan with the reason
// and the way out; a cluster that could not be asked leaves it to apply.
// (runner_admission_policy = false: the backend's CheckAdmission passes and
// its Check warns, TestCheckWarnsAdmissionOff.)
func TestPlanAdmission(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		errs     int
		warnings int
		says     string
	}{
		{"served", nil, 0, 0, ""},
		{"missing", kubedeploy.ErrNoAdmissionAPI, 1, 0, "runner_admission_policy = false"},
		{"unreachable", fmt.Errorf("%w: dial", agentspec.ErrBackendUnreachable), 0, 1, "apply checks it"},
	} {
		r := &agentResource{data: &providerData{kube: &kubeSettings{}}}
		var d diag.Diagnostics
		r.planAdmission(context.Background(), admissionStub{err: tc.err}, &d)
		if d.ErrorsCount() != tc.errs || d.WarningsCount() != tc.warnings {
			t.Errorf("%s: %d errors, %d warnings: %v", tc.name, d.ErrorsCount(), d.WarningsCount(), d)
			continue
		}
		if tc.says != "" && !strings.Contains(d[0].Detail(), tc.says) {
			t.Errorf("%s: %q does not say %q", tc.name, d[0].Detail(), tc.says)
		}
	}
}
