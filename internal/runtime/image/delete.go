package image

import (
	"context"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dimage "github.com/docker/docker/api/types/image"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
)

// Target names what Delete removes. Container is empty when the isolation
// image layered straight onto the base (which is never removed).
type Target struct {
	Isolated, IsolatedID   string
	Container, ContainerID string
}

// Delete removes the isolation image and the container image it made. An
// image a container still uses is an ErrInUse naming the containers, and
// nothing is removed; an image already gone is done. The container image
// stays while another isolation image is built on it.
func (b *Builder) Delete(ctx context.Context, t Target) error {
	if err := b.checkUnused(ctx, t.IsolatedID, t.ContainerID); err != nil {
		return err
	}
	if t.Isolated != "" {
		if err := b.removeTagged(ctx, t.Isolated, t.IsolatedID); err != nil {
			return err
		}
	}
	if t.Container == "" {
		return nil
	}
	others, err := b.cli.ImageList(ctx, dimage.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", LabelContainerImage+"="+t.Container)),
	})
	if err != nil {
		return fmt.Errorf("list isolation images on %s: %w", t.Container, err)
	}
	for _, o := range others {
		if o.ID != t.IsolatedID {
			return nil // still the base of another isolation image
		}
	}
	return b.removeTagged(ctx, t.Container, t.ContainerID)
}

// removeTagged removes tag when it still points at id. When the tag has
// moved on (a rebuild, or someone else's image), only our old image id is
// removed, never what the tag now names.
func (b *Builder) removeTagged(ctx context.Context, tag, id string) error {
	ins, err := b.cli.ImageInspect(ctx, tag)
	switch {
	case cerrdefs.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("inspect %s: %w", tag, err)
	case id == "" || ins.ID == id:
		if _, err := b.cli.ImageRemove(ctx, tag, dimage.RemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("remove image %s: %w", tag, err)
		}
		return nil
	}
	if id == "" {
		return nil
	}
	return b.removeID(ctx, id)
}

// removeID removes an untagged image of ours by id; gone is done.
func (b *Builder) removeID(ctx context.Context, id string) error {
	ins, err := b.cli.ImageInspect(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect %s: %w", shortID(id), err)
	}
	if ins.Config == nil || ins.Config.Labels[engine.LabelManagedBy] != engine.ManagedByValue {
		return nil
	}
	if err := b.checkUnused(ctx, id); err != nil {
		return err
	}
	if len(ins.RepoTags) > 0 {
		return nil // tagged again by someone: theirs now
	}
	if _, err := b.cli.ImageRemove(ctx, id, dimage.RemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove image %s: %w", shortID(id), err)
	}
	return nil
}

// checkUnused returns ErrInUse naming every container (running or not)
// created from one of ids.
func (b *Builder) checkUnused(ctx context.Context, ids ...string) error {
	var users []string
	for _, id := range ids {
		if id == "" {
			continue
		}
		cs, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("ancestor", id))})
		if err != nil {
			return fmt.Errorf("list containers of %s: %w", shortID(id), err)
		}
		for _, c := range cs {
			if c.ImageID != id {
				continue // built on a child image, which keeps its own layers
			}
			name := c.ID[:12]
			if len(c.Names) > 0 {
				name = strings.TrimPrefix(c.Names[0], "/")
			}
			users = append(users, fmt.Sprintf("%s (%s, image %s)", name, c.State, shortID(id)))
		}
	}
	if len(users) > 0 {
		return fmt.Errorf("%w: used by container(s) %s; remove them first (or the meepa_agent that runs them), "+
			"or set keep_locally = true to leave the image", ErrInUse, strings.Join(users, ", "))
	}
	return nil
}
