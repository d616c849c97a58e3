package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// With a registry, isolated_image (and the id) name the isolation image
// where the cluster pulls it, <address>/<repo>:<tag>; the image service
// keeps working with the daemon's own tag. publish and local translate.

// publish rewrites the model's isolation image to its registry name.
func (r *isolationImageResource) publish(m *isolationImageModel, diags *diag.Diagnostics) {
	reg := r.data.registry
	if reg == nil || m.IsolatedImage.IsUnknown() || m.IsolatedImage.ValueString() == "" {
		return
	}
	pub, err := reg.Published(m.IsolatedImage.ValueString())
	if err != nil {
		addRuntimeError(diags, "Invalid Registry Reference", "naming the isolation image in "+reg.String(), err)
		return
	}
	m.IsolatedImage, m.ID = types.StringValue(pub), types.StringValue(pub)
}

// local is the model with the daemon's tag back in place of the registry
// name.
func (r *isolationImageResource) local(m isolationImageModel) isolationImageModel {
	if reg := r.data.registry; reg != nil {
		if tag, ok := reg.Local(m.IsolatedImage.ValueString()); ok {
			m.IsolatedImage = types.StringValue(tag)
		}
		if tag, ok := reg.Local(m.ID.ValueString()); ok {
			m.ID = types.StringValue(tag)
		}
	}
	return m
}

// pusher copies built images to the provider's registry; nil without one.
func (r *isolationImageResource) pusher(ctx context.Context, diags *diag.Diagnostics) *kube.ImagePusher {
	if r.data.registry == nil {
		return nil
	}
	cli := r.data.dockerClient(ctx, diags)
	if cli == nil {
		return nil
	}
	p, err := kube.NewImagePusher(cli, *r.data.registry, loggerFor(ctx))
	if err != nil {
		addErrors(diags, err, "Invalid Registry", "", nil)
		return nil
	}
	return p
}

// pushed reports whether the registry still has the image; an image gone
// from it is gone for the cluster, and the plan pushes it again.
func (r *isolationImageResource) pushed(ctx context.Context, local string, diags *diag.Diagnostics) bool {
	p := r.pusher(ctx, diags)
	if p == nil {
		return false
	}
	has, err := p.Has(ctx, local)
	if err != nil {
		addRuntimeError(diags, "Cannot Read Isolation Image", "checking the registry", err)
		return false
	}
	return has
}
