package testutil

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

// SweepTopologies removes what crashed test runs left behind: every
// ThreeGate topology whose name (the value of label on its networks)
// starts with prefix and whose networks were created more than age ago.
// Containers wearing the label go first (a crashed verification leaves its
// probes attached); then teardown, the same code that destroys a topology
// in production, removes the proxy, the networks and the firewall chains.
// It returns the names it swept.
func SweepTopologies(ctx context.Context, cli client.APIClient, label, prefix string, age time.Duration,
	teardown func(ctx context.Context, name string) error) ([]string, error) {
	if prefix == "" {
		return nil, errors.New("sweep: an empty prefix would match every topology")
	}
	nets, err := cli.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", label))})
	if err != nil {
		return nil, fmt.Errorf("network list: %w", err)
	}
	stale := map[string]bool{}
	for _, n := range nets {
		name := n.Labels[label]
		if strings.HasPrefix(name, prefix) && time.Since(n.Created) > age {
			stale[name] = true
		}
	}
	var swept []string
	var errs []error
	for name := range stale {
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", label+"="+name))})
		if err != nil {
			errs = append(errs, fmt.Errorf("container list of topology %s: %w", name, err))
			continue
		}
		for _, c := range cs {
			if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
				errs = append(errs, fmt.Errorf("container remove %s: %w", c.ID, err))
			}
		}
		if err := teardown(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("teardown %s: %w", name, err))
			continue
		}
		swept = append(swept, name)
	}
	return swept, errors.Join(errs...)
}

// FirewallDrift reads the live rules of set and lists how they differ from
// it; empty when they are in place.
func FirewallDrift(ctx context.Context, h *firewall.Host, set firewall.Set) ([]string, error) {
	live, err := h.Read(ctx, set)
	if err != nil {
		return nil, err
	}
	return firewall.Diff(set, live), nil
}
