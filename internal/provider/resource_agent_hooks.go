package provider

import (
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

var agentIDRegexp = regexp.MustCompile(workspace.IDPattern)

var objectAsOpts = basetypes.ObjectAsOptions{}

func containsUnknown(l types.List) bool {
	for _, e := range l.Elements() {
		if e.IsUnknown() {
			return true
		}
	}
	return false
}

// unjoin lists the errors of an errors.Join, or err alone.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	// Only the top level: a step's own cause may be a join too.
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
