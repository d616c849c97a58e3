package sandbox

import (
	"context"
	"errors"
)

// ErrNotEnforced is the error of a message refused because the host
// firewall that its container's networks rely on is not confirmed in force.
// The runner answers it as 503 with kind "not_enforced": nothing ran, and
// the same message can be sent again once enforcement is back.
var ErrNotEnforced = errors.New("the host firewall of this agent's ThreeGate networks is not in force")

// EnforcementCheck says whether a container joining the sandbox's networks
// may run now; nil error means yes. It is asked before every container
// start (prestarted ones included) and again before a message is handed
// to a container that was prestarted earlier.
type EnforcementCheck func(ctx context.Context) error

// enforced runs the check, if any.
func (d *Docker) enforced(ctx context.Context) error {
	if d.opts.Enforcement == nil {
		return nil
	}
	return d.opts.Enforcement(ctx)
}
