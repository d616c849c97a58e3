// Package bridge is the provider-managed network behind network = "bridge":
// per-message containers get outbound access and nothing else of the
// machine. Docker's default bridge would let them reach the host's
// services (through the gateway), every other container on it, and the
// cloud metadata address 169.254.169.254.
//
// Three parts, each closing one of those paths, all made idempotently by
// Ensure when an agent uses the network:
//   - the Docker network sandbox.ManagedBridge, with inter-container
//     communication off (enable_icc=false), IPv6 off and a fixed Linux
//     bridge name (Interface), so the host rules can match the interface;
//   - the host rule set firewall.BuildBridge, in chains of its own reached
//     from DOCKER-USER and INPUT: DROP from the bridge to private,
//     link-local, loopback and multicast space, and to the host itself;
//   - a guard container (package guard, the same one a ThreeGate topology
//     has) holding that rule set: it applies it in one iptables-restore
//     transaction, puts it back within a second after a flush or a boot
//     (Docker restarts it), and its health is what the runner asks before
//     it starts a container on the network. No guard, or one that has not
//     confirmed the rules, and the message is refused (fail closed).
//
// Why the guard applies the rules and not the provider: it runs as root
// with NET_ADMIN on the daemon's host, which is where the containers run;
// the provider may be an unprivileged user in the docker group. Ensure
// waits until the guard reports the rules in force.
//
// The network, rules and guard are shared by every agent on the host and
// are not removed with an agent (another may still use them); deleting the
// network by hand while no container is on it is safe, the next apply
// makes it again.
package bridge

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/logging"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// Interface is the Linux bridge of the managed network (sandbox.ManagedBridge).
const (
	Interface = "meepa-br0"
	// HealthyWait bounds how long Ensure waits for the guard to confirm
	// the rules.
	HealthyWait = 30 * time.Second
)

// Docker driver options of the network.
const (
	optBridgeName = "com.docker.network.bridge.name"
	optICC        = "com.docker.network.bridge.enable_icc"
)

// mu serialises Ensure within the provider: terraform applies agents in
// parallel, and two creates of one network or one guard would race.
var mu sync.Mutex

// createOptions is how the network is made: a bridge with a fixed
// interface name, no inter-container traffic, IPv6 off said explicitly
// (the rules are IPv4 only), and the project's ownership labels. The
// subnet comes from the daemon's default address pools.
func createOptions() network.CreateOptions {
	ipv6 := false
	return network.CreateOptions{
		Driver:     "bridge",
		EnableIPv6: &ipv6,
		Options:    map[string]string{optBridgeName: Interface, optICC: "false"},
		Labels:     engine.Labels("network", map[string]string{guard.LabelBridge: sandbox.ManagedBridge}),
	}
}

// problems lists what is wrong with an existing network of that name.
func problems(in network.Inspect) []string {
	var out []string
	if in.Labels[engine.LabelManagedBy] != engine.ManagedByValue || in.Labels[guard.LabelBridge] != sandbox.ManagedBridge {
		out = append(out, fmt.Sprintf("network %s was not made by this provider (no %s label)", sandbox.ManagedBridge, guard.LabelBridge))
	}
	if in.Driver != "bridge" {
		out = append(out, fmt.Sprintf("network %s has driver %q, want bridge", sandbox.ManagedBridge, in.Driver))
	}
	if in.Options[optICC] != "false" {
		out = append(out, fmt.Sprintf("network %s allows inter-container communication (%s is %q)", sandbox.ManagedBridge, optICC, in.Options[optICC]))
	}
	if in.Options[optBridgeName] != Interface {
		out = append(out, fmt.Sprintf("network %s has bridge interface %q, want %s", sandbox.ManagedBridge, in.Options[optBridgeName], Interface))
	}
	if in.EnableIPv6 {
		out = append(out, fmt.Sprintf("network %s has IPv6 on, which no rule covers", sandbox.ManagedBridge))
	}
	if _, err := subnet(in); err != nil {
		out = append(out, err.Error())
	}
	return out
}

// subnet is the network's one IPv4 subnet.
func subnet(in network.Inspect) (netip.Prefix, error) {
	for _, c := range in.IPAM.Config {
		if p, err := netip.ParsePrefix(c.Subnet); err == nil && p.Addr().Is4() {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("network %s has no IPv4 subnet", sandbox.ManagedBridge)
}

// Params are the firewall parameters of the live network, with dns the
// resolvers DNS may go to (HostResolvers).
func Params(in network.Inspect, dns []netip.Addr) (firewall.BridgeParams, error) {
	p, err := subnet(in)
	return firewall.BridgeParams{Name: sandbox.ManagedBridge, Interface: Interface, Subnet: p, DNS: dns}, err
}

// ensureNetwork returns the managed network, creating it when absent and
// replacing a wrong one of ours that no container uses.
func ensureNetwork(ctx context.Context, cli client.APIClient, log logging.Logger) (network.Inspect, error) {
	in, err := cli.NetworkInspect(ctx, sandbox.ManagedBridge, network.InspectOptions{})
	switch {
	case errdefs.IsNotFound(err):
	case err != nil:
		return in, fmt.Errorf("network inspect %s: %w", sandbox.ManagedBridge, err)
	default:
		p := problems(in)
		if len(p) == 0 {
			return in, nil
		}
		if in.Labels[guard.LabelBridge] != sandbox.ManagedBridge || len(in.Containers) > 0 {
			return in, fmt.Errorf("network %s: %v; remove it (docker network rm %s) once no container uses it, and apply again", sandbox.ManagedBridge, p, sandbox.ManagedBridge)
		}
		log.Warn("managed bridge network differs; recreating", "network", sandbox.ManagedBridge, "problems", p)
		if err := cli.NetworkRemove(ctx, in.ID); err != nil && !errdefs.IsNotFound(err) {
			return in, fmt.Errorf("network remove %s: %w", sandbox.ManagedBridge, err)
		}
	}
	resp, err := cli.NetworkCreate(ctx, sandbox.ManagedBridge, createOptions())
	if err != nil && !errdefs.IsConflict(err) {
		return in, fmt.Errorf("network create %s: %w", sandbox.ManagedBridge, err)
	}
	if in, err = cli.NetworkInspect(ctx, sandbox.ManagedBridge, network.InspectOptions{}); err != nil {
		return in, fmt.Errorf("network inspect %s: %w", sandbox.ManagedBridge, err)
	}
	if p := problems(in); len(p) > 0 {
		return in, fmt.Errorf("network %s after create: %v", sandbox.ManagedBridge, p)
	}
	log.Debug("managed bridge network created", "network", sandbox.ManagedBridge, "id", resp.ID, "interface", Interface, "subnet", in.IPAM.Config)
	return in, nil
}

// want is the guard the network needs. image is the one a guard already
// runs, so that agents with different isolation images share one guard
// instead of replacing it at every apply; else the caller's.
func want(ctx context.Context, cli client.APIClient, p firewall.BridgeParams, image string) (guard.Want, error) {
	c, err := cli.ContainerInspect(ctx, guard.Name(sandbox.ManagedBridge))
	switch {
	case errdefs.IsNotFound(err):
	case err != nil:
		return guard.Want{}, fmt.Errorf("container inspect %s: %w", guard.Name(sandbox.ManagedBridge), err)
	case c.Config != nil && c.Config.Image != "":
		if _, err := cli.ImageInspect(ctx, c.Config.Image); err == nil {
			image = c.Config.Image
		}
	}
	return guard.Want{Topology: sandbox.ManagedBridge, Image: image, Bridge: &p}, nil
}

// Ensure makes the managed network, its rules and its guard, and returns
// once the guard has confirmed the rules in force. image is an isolation
// image (it holds agent-runner) to run the guard from when there is none;
// dns are the resolvers DNS may reach (HostResolvers).
func Ensure(ctx context.Context, cli client.APIClient, image string, dns []netip.Addr, log logging.Logger) error {
	log = logging.Or(log)
	mu.Lock()
	defer mu.Unlock()
	// Its rules, resolvers and guard mounts are this machine's.
	if local, why, err := guard.DaemonIsLocal(ctx, cli); err != nil {
		return err
	} else if !local {
		return fmt.Errorf("network = \"bridge\" needs the Docker daemon on the machine that runs the provider (its firewall is this machine's), and %s", why)
	}
	in, err := ensureNetwork(ctx, cli, log)
	if err != nil {
		return err
	}
	p, err := Params(in, dns)
	if err != nil {
		return err
	}
	w, err := want(ctx, cli, p, image)
	if err != nil {
		return err
	}
	drift, _, err := guard.Drift(ctx, cli, w)
	if err != nil {
		return err
	}
	if len(drift) > 0 {
		// A guard holding another subnet's rules would keep them; replace it.
		log.Debug("managed bridge guard differs; replacing", "drift", drift)
		if err := guard.Remove(ctx, cli, sandbox.ManagedBridge); err != nil {
			return err
		}
	}
	if err := guard.Ensure(ctx, cli, w, HealthyWait); err != nil {
		return fmt.Errorf("managed bridge %s: %w", sandbox.ManagedBridge, err)
	}
	log.Debug("managed bridge in force", "network", sandbox.ManagedBridge, "subnet", p.Subnet.String(), "guard", guard.Name(sandbox.ManagedBridge))
	return nil
}

// Drift lists, in words, what of the managed network is missing or
// different (empty: in force): the network, its settings, the guard and,
// when this process may read iptables, the rules themselves.
func Drift(ctx context.Context, cli client.APIClient, image string, dns []netip.Addr) ([]string, error) {
	in, err := cli.NetworkInspect(ctx, sandbox.ManagedBridge, network.InspectOptions{})
	if errdefs.IsNotFound(err) {
		return []string{fmt.Sprintf("managed bridge network %s is missing", sandbox.ManagedBridge)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("network inspect %s: %w", sandbox.ManagedBridge, err)
	}
	out := problems(in)
	p, err := Params(in, dns)
	if err != nil {
		return out, nil
	}
	w, err := want(ctx, cli, p, image)
	if err != nil {
		return nil, err
	}
	gd, _, err := guard.Drift(ctx, cli, w)
	if err != nil {
		return nil, err
	}
	out = append(out, gd...)
	// The guard's health says the rules were in force a moment ago; the
	// rules themselves, when readable here, say whether they are now.
	if h, err := firewall.Open(ctx, nil); err == nil {
		set := firewall.BuildBridge(p)
		if live, err := h.Read(ctx, set); err == nil {
			out = append(out, firewall.Diff(set, live)...)
		}
	}
	return out, nil
}
