package image

import (
	"context"
	"encoding/json"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
)

// Observed is an isolation image as the daemon has it, with what its labels
// say it was built from. A foreign image at the tag has no labels: every
// field that comes from one is then empty.
type Observed struct {
	IsolatedID   string
	Managed      bool
	Spec         Spec
	ContentHash  string
	RunnerSHA256 string
	Image        string // the image it layers onto (label)
	ImageID      string // that image's current id; "" when it is gone
	// ImageContentHash is the content hash label of the image now at Image;
	// it differs from ContentHash when that tag was moved out of band.
	ImageContentHash string
	BaseImageID      string // the base's id when it was built (label)
}

// Read inspects the isolation image at tag; ErrNotFound when it is gone.
func (b *Builder) Read(ctx context.Context, tag string) (Observed, error) {
	var o Observed
	ins, err := b.cli.ImageInspect(ctx, tag)
	if cerrdefs.IsNotFound(err) {
		return o, ErrNotFound
	}
	if err != nil {
		return o, fmt.Errorf("inspect %s: %w", tag, err)
	}
	o.IsolatedID = ins.ID
	var l map[string]string
	if ins.Config != nil {
		l = ins.Config.Labels
	}
	o.Managed = l[engine.LabelManagedBy] == engine.ManagedByValue && l[engine.LabelComponent] == ComponentIsolation
	if !o.Managed {
		return o, nil
	}
	o.ContentHash = l[LabelContentHash]
	o.RunnerSHA256 = l[LabelRunnerSHA256]
	o.Image = l[LabelContainerImage]
	o.BaseImageID = l[LabelBaseImageID]
	o.Spec = Spec{BaseImage: l[LabelBaseImage], Manager: Manager(l[LabelPackageManager])}
	if err := json.Unmarshal([]byte(l[LabelPackages]), &o.Spec.Packages); err != nil && l[LabelPackages] != "" {
		return o, fmt.Errorf("%s: label %s: %w", tag, LabelPackages, err)
	}
	if err := json.Unmarshal([]byte(l[LabelEnv]), &o.Spec.Env); err != nil && l[LabelEnv] != "" {
		return o, fmt.Errorf("%s: label %s: %w", tag, LabelEnv, err)
	}
	if len(o.Spec.Env) == 0 {
		o.Spec.Env = nil
	}
	if len(o.Spec.Packages) == 0 {
		o.Spec.Packages = nil
	}
	if o.Image != "" {
		if img, err := b.cli.ImageInspect(ctx, o.Image); err == nil {
			o.ImageID = img.ID
			if img.Config != nil {
				o.ImageContentHash = img.Config.Labels[LabelContentHash]
			}
		} else if !cerrdefs.IsNotFound(err) {
			return o, fmt.Errorf("inspect %s: %w", o.Image, err)
		}
	}
	return o, nil
}
