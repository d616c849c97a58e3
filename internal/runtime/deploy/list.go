package deploy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// List is agentspec.Backend's: every agent with a runner config under the
// state directory (importable), and every runner container whose config
// directory is under it but holds no config (an orphan). Runner containers
// of other state directories are not this provider's to list.
func (s *Service) List(ctx context.Context) ([]agentspec.Listed, error) {
	fail := func(err error) ([]agentspec.Listed, error) {
		return nil, stepErr(agentspec.StepList, "", "listing the agents under "+s.o.StateDir, err)
	}
	byID := map[string]*agentspec.Listed{}
	entries, err := os.ReadDir(filepath.Join(s.o.StateDir, "runners"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	for _, e := range entries {
		id := e.Name()
		if !e.IsDir() || !workspace.ValidID(id) {
			continue
		}
		if _, err := os.Stat(s.Layout(id).ConfigFile); err != nil {
			continue // a runner of this id, if any, is found below
		}
		status := agentspec.StatusExternal
		if m, err := ReadMeta(s.Layout(id)); err == nil && m.Deployment == agentspec.ModeContainer {
			status = agentspec.StatusMissing
		}
		byID[id] = &agentspec.Listed{ID: id, Status: status}
	}
	cli, err := s.docker(ctx)
	if err != nil {
		return nil, err
	}
	runners, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", engine.LabelManagedBy+"="+engine.ManagedByValue),
		filters.Arg("label", engine.LabelComponent+"="+ComponentRunner),
	)})
	if err != nil {
		return fail(err)
	}
	for _, c := range runners {
		id := c.Labels[sandbox.LabelAgent]
		if !workspace.ValidID(id) || !mountsDir(c, s.Layout(id).Dir) {
			continue
		}
		l := byID[id]
		if l == nil {
			l = &agentspec.Listed{ID: id, Orphan: "its runner container " + ContainerName(id) + " is left, with no runner config under " +
				s.Layout(id).Dir + ": remove the container (docker rm -f " + ContainerName(id) + ")"}
			byID[id] = l
		}
		l.Status = "stopped"
		if c.State == "running" {
			l.Status = agentspec.StatusRunning
		}
	}
	out := make([]agentspec.Listed, 0, len(byID))
	for _, l := range byID {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b agentspec.Listed) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// mountsDir says whether c mounts the host directory dir: a runner's
// config directory names the state directory it belongs to.
func mountsDir(c container.Summary, dir string) bool {
	for _, m := range c.Mounts {
		if m.Source == dir {
			return true
		}
	}
	return false
}
