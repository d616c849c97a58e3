package topology

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// GuardHealthyWait bounds how long Apply waits for a new guard to confirm
// the rules, so that agents applied right after the topology are not
// refused.
const GuardHealthyWait = 30 * time.Second

// ErrRemoteDaemon is the FirewallOpen failure of a daemon that does not
// program this machine's network: the rules would be written here while
// the containers run elsewhere.
var ErrRemoteDaemon = errors.New("the host firewall needs the Docker daemon on this machine")

// GuardWant is the firewall guard a spec asks for (see package guard):
// enforcing its rule set, or only marking that the firewall is off.
func GuardWant(s topospec.Spec) guard.Want {
	w := guard.Want{Topology: s.Name, Image: s.Proxy.Image}
	if s.Docker.Firewall.Enabled {
		p := FirewallParams(s)
		w.Params = &p
	}
	return w
}

// checkLocal refuses, before anything is touched, a daemon whose bridge
// gateways are not addresses of this machine (a forwarded socket).
func (sv *Service) checkLocal(ctx context.Context, s topospec.Spec) error {
	if !s.Docker.Firewall.Enabled {
		return nil
	}
	local, why, err := guard.DaemonIsLocal(ctx, sv.docker)
	if err != nil {
		return err
	}
	if !local {
		return &FirewallError{Op: FirewallOpen, Err: fmt.Errorf("%w, and %s; run terraform on the Docker host, "+
			"or set firewall = { enabled = false } and enforce the topology there yourself", ErrRemoteDaemon, why)}
	}
	return nil
}

// withGuard wraps the firewall step of ensure: a guard holding another rule
// set goes first (it would put the old rules back), then the rules are
// applied, then the guard is started and Apply waits until it confirms them.
func (sv *Service) withGuard(s topospec.Spec, applyRules func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		want := GuardWant(s)
		drift, _, err := guard.Drift(ctx, sv.docker, want)
		if err != nil {
			return err
		}
		if len(drift) > 0 {
			sv.log.Debug("firewall guard differs; replacing", "topology", s.Name, "drift", drift)
			if err := guard.Remove(ctx, sv.docker, s.Name); err != nil {
				return err
			}
		}
		if err := applyRules(ctx); err != nil {
			return err
		}
		if err := guard.Ensure(ctx, sv.docker, want, GuardHealthyWait); err != nil {
			return err
		}
		sv.log.Debug("firewall guard running", "topology", s.Name, "container", guard.Name(s.Name), "enforcing", want.Params != nil)
		return nil
	}
}

// removeGuard takes the guard away; before the rules, which it would put back.
func (sv *Service) removeGuard(ctx context.Context, name string) error {
	if err := guard.Remove(ctx, sv.docker, name); err != nil {
		return err
	}
	sv.log.Debug("firewall guard removed", "topology", name, "container", guard.Name(name))
	return nil
}
