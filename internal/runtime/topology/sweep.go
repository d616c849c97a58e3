package topology

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
)

// SweepStale removes what crashed test runs left behind: every topology
// whose name starts with prefix and whose networks were created more than
// age ago — its containers, networks and firewall chains. Objects are
// found by their ownership labels only, so nothing else is touched. It
// returns the names it swept.
func SweepStale(ctx context.Context, cli client.APIClient, prefix string, age time.Duration) ([]string, error) {
	if prefix == "" {
		return nil, errors.New("sweep: an empty prefix would match every topology")
	}
	nets, err := cli.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelTopology))})
	if err != nil {
		return nil, fmt.Errorf("network list: %w", err)
	}
	stale := map[string]bool{}
	for _, n := range nets {
		name := n.Labels[LabelTopology]
		if strings.HasPrefix(name, prefix) && time.Since(n.Created) > age {
			stale[name] = true
		}
	}
	var swept []string
	var errs []error
	for name := range stale {
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelTopology+"="+name))})
		if err != nil {
			errs = append(errs, fmt.Errorf("container list of topology %s: %w", name, err))
			continue
		}
		for _, c := range cs {
			errs = append(errs, removeContainer(ctx, cli, c.ID))
		}
		for _, n := range nets {
			if n.Labels[LabelTopology] == name {
				errs = append(errs, removeNetwork(ctx, cli, n.ID))
			}
		}
		// No iptables (or no DOCKER-USER) means there are no chains to sweep.
		if h, err := firewall.Open(ctx); err == nil {
			errs = append(errs, h.Remove(ctx, firewall.Build(firewall.Params{Name: name})))
		}
		swept = append(swept, name)
	}
	return swept, errors.Join(errs...)
}
