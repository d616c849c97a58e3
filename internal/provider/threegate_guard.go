package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/client"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
)

// guardHealthyWait bounds how long apply waits for a new guard to confirm
// the rules, so agents applied right after the topology are not refused.
const guardHealthyWait = 30 * time.Second

// guardWant is the guard a topology spec asks for (see package guard):
// enforcing its rule set, or marking that the firewall is off.
func guardWant(spec topology.Spec) guard.Want {
	w := guard.Want{Topology: spec.Name, Image: spec.Proxy.Image}
	if spec.Firewall.Enabled {
		p := spec.FirewallParams()
		w.Params = &p
	}
	return w
}

// withGuard wraps the firewall step of topology.Ensure: it refuses a
// daemon that does not program this machine's network, takes away a guard
// holding an older rule set (it would put the old rules back), applies the
// rules, then starts the guard and waits until it confirms them.
func withGuard(cli client.APIClient, spec topology.Spec, applyRules func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if spec.Firewall.Enabled {
			local, why, err := guard.DaemonIsLocal(ctx, cli)
			if err != nil {
				return err
			}
			if !local {
				return fmt.Errorf("the host firewall needs the Docker daemon on this machine, and %s; "+
					"run terraform on the Docker host, or set firewall = { enabled = false } and enforce the topology there yourself", why)
			}
		}
		drift, err := guard.Drift(ctx, cli, guardWant(spec))
		if err != nil {
			return err
		}
		if len(drift) > 0 {
			if err := guard.Remove(ctx, cli, spec.Name); err != nil {
				return err
			}
		}
		if err := applyRules(ctx); err != nil {
			return err
		}
		return guard.Ensure(ctx, cli, guardWant(spec), guardHealthyWait)
	}
}

// guardDrift is the guard's part of Read's drift.
func guardDrift(ctx context.Context, cli client.APIClient, spec topology.Spec, diags *diag.Diagnostics) []string {
	d, err := guard.Drift(ctx, cli, guardWant(spec))
	if err != nil {
		addRuntimeError(diags, "ThreeGate Read Failed", "inspecting the firewall guard of "+spec.Name, err)
	}
	return d
}

// refuseRemoteFirewall stops a plan whose host firewall would be written
// into this machine's iptables while the daemon, and so the containers,
// run on another: the topology would converge with no enforcement at all.
func refuseRemoteFirewall(d *providerData, spec topology.Spec, diags *diag.Diagnostics) bool {
	if !spec.Firewall.Enabled || dockerIsLocal(d) {
		return false
	}
	diags.AddAttributeError(path.Root("firewall").AtName("enabled"), "Host Firewall Needs A Local Docker Daemon",
		fmt.Sprintf("docker_host is %s: the daemon runs on another machine, but the host firewall (iptables chains and the "+
			"guard that restores them) is written on the machine that runs terraform, so the topology's containers would run "+
			"there without it. Run terraform on the Docker host (docker_host unset or its unix:// socket), or set "+
			"firewall = { enabled = false } and enforce the topology on that host yourself (see iptables_restore).",
			engine.HostOf(d.docker.opts)))
	return true
}
