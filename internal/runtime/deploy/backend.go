package deploy

import "github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"

var _ agentspec.Backend = (*Service)(nil)
