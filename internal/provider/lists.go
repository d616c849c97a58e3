package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Conversions between Go string slices and Terraform lists, shared by the
// resources and data sources.

// orEmpty is s, or an empty slice for nil (a known empty list, not null).
func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// listOrNull is s as a list of strings, or null when s is empty.
func listOrNull(ctx context.Context, s []string) types.List {
	if len(s) == 0 {
		return types.ListNull(types.StringType)
	}
	v, _ := types.ListValueFrom(ctx, types.StringType, s)
	return v
}
