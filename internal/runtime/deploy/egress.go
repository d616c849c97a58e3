package deploy

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
)

// egressFor is a FETCH agent's egress block: its key derived from the
// topology's (read from the live proxy), the proxy URL, and the owner's
// policy, checked once more against the live topology's allow list (the
// plan checked it against the planned one). Other roles reach no proxy
// and get none.
func egressFor(ctx context.Context, cli client.APIClient, topo, agentID, role, proxyURL string, planned *agentspec.Egress) (*agentspec.Egress, error) {
	if role != agentspec.RoleFetch {
		if planned != nil && !planned.Policy.IsZero() {
			return nil, fmt.Errorf("egress: only a fetch agent has an egress policy; this one's role is %s", role)
		}
		return nil, nil
	}
	var policy proxy.Policy
	if planned != nil {
		policy = planned.Policy
	}
	spec, err := topology.LiveSpec(ctx, cli, topo)
	if err != nil {
		return nil, fmt.Errorf("topology %q: %w", topo, err)
	}
	if errs := proxy.Narrows(spec.Proxy.Allow, spec.Docker.AllowPrivate, policy); len(errs) > 0 {
		return nil, proxy.PolicyErrors(errs)
	}
	key, err := topology.EgressKey(ctx, cli, topo)
	if err != nil {
		return nil, err
	}
	return &agentspec.Egress{Key: hex.EncodeToString(proxy.AgentKey(key, agentID)), Proxy: proxyURL, Policy: policy}, nil
}
