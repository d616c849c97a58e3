package topology

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// List is topospec.Backend's: every topology of the daemon by the labels
// of its proxy container and its networks. One whose proxy is there can be
// imported. What a topology leaves when its proxy is gone is an orphan:
// its networks, its firewall guard container (which keeps putting the
// rules back) and, when the daemon is this machine's, its chains in the
// host's iptables.
func (b *Backend) List(ctx context.Context) ([]topospec.Listed, error) {
	sv, err := b.service(ctx)
	if err != nil {
		return nil, err
	}
	owned := filters.NewArgs(filters.Arg("label", engine.LabelManagedBy+"="+engine.ManagedByValue), filters.Arg("label", LabelTopology))
	ctrs, err := sv.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: owned.Clone()})
	if err != nil {
		return nil, fmt.Errorf("listing the topologies' proxy containers: %w", err)
	}
	nets, err := sv.docker.NetworkList(ctx, network.ListOptions{Filters: owned})
	if err != nil {
		return nil, fmt.Errorf("listing the topologies' networks: %w", err)
	}
	withProxy := map[string]bool{}
	for _, c := range ctrs {
		name := c.Labels[LabelTopology]
		if c.Labels[engine.LabelComponent] == "proxy" && slices.Contains(c.Names, "/"+topospec.ProxyName(name)) {
			withProxy[name] = true
		}
	}
	left := map[string]*leftOver{}
	of := func(name string) *leftOver {
		if left[name] == nil {
			left[name] = &leftOver{}
		}
		return left[name]
	}
	for _, n := range nets {
		if name := n.Labels[LabelTopology]; !withProxy[name] && n.Labels[engine.LabelComponent] == "network" {
			of(name).networks = append(of(name).networks, n.Name)
		}
	}
	for _, c := range ctrs {
		if name := c.Labels[LabelTopology]; !withProxy[name] && c.Labels[engine.LabelComponent] == guard.Component && len(c.Names) > 0 {
			of(name).guards = append(of(name).guards, strings.TrimPrefix(c.Names[0], "/"))
		}
	}
	chains, err := sv.hostChains(ctx)
	if err != nil {
		return nil, err
	}
	for name, cs := range chains {
		if !withProxy[name] {
			of(name).chains = cs
		}
	}
	var out []topospec.Listed
	for name := range withProxy {
		out = append(out, topospec.Listed{Name: name})
	}
	for name, l := range left {
		out = append(out, topospec.Listed{Name: name, Orphan: l.describe(name)})
	}
	slices.SortFunc(out, func(a, b topospec.Listed) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// hostChains is firewall.Host.TopologyChains when the daemon is this
// machine's and iptables is here; none otherwise (the chains of another
// machine cannot be seen, and a host without iptables has none).
func (sv *Service) hostChains(ctx context.Context) (map[string][]string, error) {
	local, _, err := guard.DaemonIsLocal(ctx, sv.docker)
	if err != nil || !local {
		return nil, err
	}
	h, err := firewall.Open(ctx, nil)
	if err != nil {
		return nil, nil
	}
	return h.TopologyChains()
}

// leftOver is what a topology without its proxy still has.
type leftOver struct{ networks, guards, chains []string }

// describe says what is left and how to remove it: applying and destroying
// a threegate_network of the name removes all of it in the right order.
func (l *leftOver) describe(name string) string {
	var parts []string
	add := func(what string, items []string) {
		if len(items) > 0 {
			slices.Sort(items)
			parts = append(parts, what+" "+strings.Join(items, ", "))
		}
	}
	add("its firewall guard container", l.guards)
	add("its networks", l.networks)
	add("its iptables chains", l.chains)
	return fmt.Sprintf("%s left without its proxy container %s: to remove them, apply a threegate_network named %q and destroy it "+
		"(by hand: the guard first, docker rm -f, or it puts the rules back; then the networks, docker network rm; then the chains' jumps and the chains)",
		strings.Join(parts, "; "), topospec.ProxyName(name), name)
}
