package image

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dimage "github.com/docker/docker/api/types/image"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
)

// PruneOptions says which of the provider's images a prune may remove.
type PruneOptions struct {
	// Keep names images that stay, by tag or by id (full or its first 12
	// hex digits).
	Keep []string
	// Match, when set, limits the prune to images with a tag it matches
	// (untagged images are then left).
	Match *regexp.Regexp
	// DryRun finds what would go and removes nothing.
	DryRun bool
}

// Pruned is one image a prune removed (or would remove).
type Pruned struct {
	Ref       string // its tags, or its short id when untagged
	Component string // ComponentIsolation or ComponentContainer
	Size      int64
}

// Prune removes the provider's isolation and container images that no
// container (running or not) uses and that opts does not keep. A container
// image stays while an isolation image that stays is built on it, so that
// a prune never leaves an isolation image without its layer underneath.
func (s *Service) Prune(ctx context.Context, opts PruneOptions) ([]Pruned, error) {
	// Top-level images only: a build's intermediate layers carry the
	// labels too, and go with the image on top of them.
	imgs, err := s.b.cli.ImageList(ctx, dimage.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", engine.LabelManagedBy+"="+engine.ManagedByValue)),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the provider's images: %w", err)
	}
	cs, err := s.b.cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, fmt.Errorf("listing the containers: %w", err)
	}
	used := map[string]bool{}
	for _, c := range cs {
		used[c.ImageID] = true
	}
	kept := func(im dimage.Summary) bool {
		if used[im.ID] {
			return true
		}
		for _, k := range opts.Keep {
			if k == im.ID || k == shortID(im.ID) || strings.TrimPrefix(im.ID, "sha256:") == k || slices.Contains(im.RepoTags, k) {
				return true
			}
		}
		if opts.Match == nil {
			return false
		}
		return !slices.ContainsFunc(im.RepoTags, opts.Match.MatchString)
	}
	var isolation, containers []dimage.Summary
	for _, im := range imgs {
		switch im.Labels[engine.LabelComponent] {
		case ComponentIsolation:
			isolation = append(isolation, im)
		case ComponentContainer:
			containers = append(containers, im)
		}
	}
	var out []Pruned
	under := map[string]bool{} // container tags an isolation image that stays is built on
	var gone []dimage.Summary
	for _, im := range isolation {
		if kept(im) {
			under[im.Labels[LabelContainerImage]] = true
			continue
		}
		gone = append(gone, im)
	}
	for _, im := range containers {
		if kept(im) || slices.ContainsFunc(im.RepoTags, func(t string) bool { return under[t] }) {
			continue
		}
		gone = append(gone, im)
	}
	for _, im := range gone {
		ref := strings.Join(im.RepoTags, ", ")
		if ref == "" {
			ref = shortID(im.ID)
		}
		if !opts.DryRun {
			if err := s.b.removeImage(ctx, im); err != nil {
				return out, err
			}
		}
		out = append(out, Pruned{Ref: ref, Component: im.Labels[engine.LabelComponent], Size: im.Size})
	}
	return out, nil
}

// removeImage removes every tag of im, then im by id if it is still there;
// an image already gone is done.
func (b *Builder) removeImage(ctx context.Context, im dimage.Summary) error {
	for _, ref := range append(slices.Clone(im.RepoTags), im.ID) {
		if _, err := b.cli.ImageRemove(ctx, ref, dimage.RemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("remove image %s: %w", ref, err)
		}
	}
	return nil
}
