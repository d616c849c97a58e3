package guard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// Enforced is what a runner asks before it starts (or hands a message to)
// a container that joins networks: for every ThreeGate network among them
// (a network labelled with its topology), the topology's guard must run,
// be healthy and have been checked recently, or have enforcement "off"
// because the user disabled the firewall. Anything else, a missing guard
// included, is an error wrapping sandbox.ErrNotEnforced: fail closed.
func Enforced(ctx context.Context, cli client.APIClient, networks []string) error {
	seen := map[string]bool{}
	for _, n := range networks {
		in, err := cli.NetworkInspect(ctx, n, network.InspectOptions{})
		if errdefs.IsNotFound(err) {
			continue // the container cannot join it either; Docker says so
		}
		if err != nil {
			return fmt.Errorf("%w: network inspect %s: %w", sandbox.ErrNotEnforced, n, err)
		}
		topo, fix := in.Labels[LabelTopology], "apply its threegate_network again to install it"
		if topo == "" {
			// A managed bridge network has a guard of its own name.
			topo, fix = in.Labels[LabelBridge], "apply an agent with network = \"bridge\" again to install it"
		}
		if topo == "" && n == sandbox.ManagedBridge {
			// Ours by name but not by label (made again by hand): no
			// guard vouches for it.
			return fmt.Errorf("%w: network %s has no guard label; apply an agent with network = \"bridge\" again", sandbox.ErrNotEnforced, n)
		}
		if topo == "" || seen[topo] {
			continue
		}
		seen[topo] = true
		if err := topologyEnforced(ctx, cli, topo, fix); err != nil {
			return err
		}
	}
	return nil
}

func topologyEnforced(ctx context.Context, cli client.APIClient, topo, fix string) error {
	name := Name(topo)
	c, err := cli.ContainerInspect(ctx, name)
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("%w: %q has no firewall guard (container %s); %s",
			sandbox.ErrNotEnforced, topo, name, fix)
	}
	if err != nil {
		return fmt.Errorf("%w: container inspect %s: %w", sandbox.ErrNotEnforced, name, err)
	}
	if c.Config != nil && c.Config.Labels[LabelEnforce] == "off" {
		return nil
	}
	if p := healthProblem(c, time.Now()); p != "" {
		return fmt.Errorf("%w: the host firewall of topology %q is not confirmed in force (guard %s %s); "+
			"messages are refused until the guard restores and confirms it (seconds after Docker starts it)",
			sandbox.ErrNotEnforced, topo, name, p)
	}
	return nil
}

// DaemonIsLocal reports whether the Docker daemon behind cli programs this
// machine's network: a bridge network's gateway address sits on this
// machine's interface of that network's name. A user-defined network's
// interface is named after its id (br-<12 hex>), which no other daemon
// shares, so those decide when there are any; the named bridges (docker0,
// meepa-br0) have the same name and often the same gateway on every host
// and decide only when there is nothing else. A unix socket forwarded from
// another machine (ssh -L) passes a scheme check but not this one.
func DaemonIsLocal(ctx context.Context, cli client.APIClient) (bool, string, error) {
	nets, err := cli.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		return false, "", fmt.Errorf("network list: %w", err)
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return false, "", fmt.Errorf("interfaces: %w", err)
	}
	onIface := map[string]map[netip.Addr]bool{}
	for _, i := range ifaces {
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		onIface[i.Name] = map[netip.Addr]bool{}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				onIface[i.Name][p.Addr()] = true
			}
		}
	}
	var byID, named []bool
	var seen []string
	for _, n := range nets {
		if n.Driver != "bridge" {
			continue
		}
		iface, fromID := n.Options["com.docker.network.bridge.name"], false
		if iface == "" && len(n.ID) >= 12 {
			iface, fromID = "br-"+n.ID[:12], true
		}
		for _, c := range n.IPAM.Config {
			match, where, ok := onInterface(onIface[iface], c)
			if !ok || iface == "" {
				continue
			}
			if fromID {
				byID = append(byID, match)
			} else {
				named = append(named, match)
			}
			seen = append(seen, fmt.Sprintf("%s %s on %s", n.Name, where, iface))
		}
	}
	switch {
	case slices.Contains(byID, true), len(byID) == 0 && slices.Contains(named, true):
		return true, "", nil
	case len(seen) == 0:
		return false, "the daemon has no bridge network with a gateway or subnet to compare with this machine's interfaces", nil
	}
	return false, fmt.Sprintf("none of the daemon's bridge gateways (%v) is on this machine's interface of that name", seen), nil
}

// onInterface says whether a network's IPAM entry is on an interface with
// addrs: its gateway is one of them or, for an entry that names no gateway
// (the default bridge of a daemon that has just been installed lists only
// its subnet), one of them lies in its subnet. ok is false for an entry
// with neither.
func onInterface(addrs map[netip.Addr]bool, c network.IPAMConfig) (match bool, where string, ok bool) {
	if gw, err := netip.ParseAddr(c.Gateway); err == nil {
		return addrs[gw], gw.String(), true
	}
	sub, err := netip.ParsePrefix(c.Subnet)
	if err != nil {
		return false, "", false
	}
	for a := range addrs {
		if sub.Contains(a) {
			return true, sub.String(), true
		}
	}
	return false, sub.String(), true
}
