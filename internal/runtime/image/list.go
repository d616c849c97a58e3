package image

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/filters"
	dimage "github.com/docker/docker/api/types/image"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
)

// Listed is an image of the provider's found on the daemon: Tag is an
// isolation image's tag (what an import takes) or, for an orphan, the tag
// left behind; Orphan, when not empty, says what is left and how to
// remove it.
type Listed struct {
	Tag    string
	Orphan string
}

// List finds the provider's images on the daemon by their labels. Every
// tagged isolation image is listed; an isolation image whose container
// image (meepa-sandbox:<hash>) is gone, and a container image no
// isolation image is built on, are orphans. Untagged images are not
// listed (nothing can import them by tag).
func (s *Service) List(ctx context.Context) ([]Listed, error) {
	imgs, err := s.b.cli.ImageList(ctx, dimage.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", engine.LabelManagedBy+"="+engine.ManagedByValue)),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the provider's images: %w", err)
	}
	containers := map[string]bool{} // container tags on the daemon
	usedBy := map[string]bool{}     // container tags an isolation image is built on
	for _, im := range imgs {
		switch im.Labels[engine.LabelComponent] {
		case ComponentContainer:
			for _, t := range im.RepoTags {
				if strings.HasPrefix(t, ContainerRepo+":") {
					containers[t] = true
				}
			}
		case ComponentIsolation:
			usedBy[im.Labels[LabelContainerImage]] = true
		}
	}
	var out []Listed
	for _, im := range imgs {
		for _, t := range im.RepoTags {
			switch comp := im.Labels[engine.LabelComponent]; {
			case comp == ComponentIsolation && strings.HasPrefix(t, IsolatedRepo+":"):
				l := Listed{Tag: t}
				if c := im.Labels[LabelContainerImage]; strings.HasPrefix(c, ContainerRepo+":") && !containers[c] {
					l.Orphan = fmt.Sprintf("its container image %s is gone: remove it (docker image rm %s)", c, t)
				}
				out = append(out, l)
			case comp == ComponentContainer && strings.HasPrefix(t, ContainerRepo+":") && !usedBy[t]:
				out = append(out, Listed{Tag: t, Orphan: fmt.Sprintf("no isolation image is built on it: remove it (docker image rm %s)", t)})
			}
		}
	}
	slices.SortFunc(out, func(a, b Listed) int { return strings.Compare(a.Tag, b.Tag) })
	return out, nil
}
