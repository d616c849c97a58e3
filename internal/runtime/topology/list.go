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
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// List is topospec.Backend's: every topology of the daemon by the labels
// of its proxy container and its networks. One whose proxy is there can be
// imported; networks left without a proxy are an orphan.
func (b *Backend) List(ctx context.Context) ([]topospec.Listed, error) {
	sv, err := b.service(ctx)
	if err != nil {
		return nil, err
	}
	owned := filters.NewArgs(filters.Arg("label", engine.LabelManagedBy+"="+engine.ManagedByValue), filters.Arg("label", LabelTopology))
	proxies, err := sv.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: owned.Clone()})
	if err != nil {
		return nil, fmt.Errorf("listing the topologies' proxy containers: %w", err)
	}
	nets, err := sv.docker.NetworkList(ctx, network.ListOptions{Filters: owned})
	if err != nil {
		return nil, fmt.Errorf("listing the topologies' networks: %w", err)
	}
	withProxy := map[string]bool{}
	for _, c := range proxies {
		name := c.Labels[LabelTopology]
		if c.Labels[engine.LabelComponent] == "proxy" && slices.Contains(c.Names, "/"+topospec.ProxyName(name)) {
			withProxy[name] = true
		}
	}
	left := map[string][]string{}
	for _, n := range nets {
		if name := n.Labels[LabelTopology]; !withProxy[name] && n.Labels[engine.LabelComponent] == "network" {
			left[name] = append(left[name], n.Name)
		}
	}
	var out []topospec.Listed
	for name := range withProxy {
		out = append(out, topospec.Listed{Name: name})
	}
	for name, ns := range left {
		slices.Sort(ns)
		out = append(out, topospec.Listed{Name: name, Orphan: fmt.Sprintf("its networks %s are left without its proxy container %s: "+
			"remove them (docker network rm %s)", strings.Join(ns, ", "), topospec.ProxyName(name), strings.Join(ns, " "))})
	}
	slices.SortFunc(out, func(a, b topospec.Listed) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
