package provider

import (
	"context"
	"maps"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
)

type isolationImageModel struct {
	ID              types.String `tfsdk:"id"`
	BaseImage       types.String `tfsdk:"base_image"`
	Packages        types.List   `tfsdk:"packages"`
	PackageManager  types.String `tfsdk:"package_manager"`
	EnvVars         types.Map    `tfsdk:"env_vars"`
	Pull            types.String `tfsdk:"pull"`
	KeepLocally     types.Bool   `tfsdk:"keep_locally"`
	Image           types.String `tfsdk:"image"`
	ImageID         types.String `tfsdk:"image_id"`
	IsolatedImage   types.String `tfsdk:"isolated_image"`
	IsolatedImageID types.String `tfsdk:"isolated_image_id"`
	ContentHash     types.String `tfsdk:"content_hash"`
	RunnerVersion   types.String `tfsdk:"runner_version"`
	RunnerSHA256    types.String `tfsdk:"runner_sha256"`
	Dockerfile      types.String `tfsdk:"dockerfile"`
}

// spec converts the model's inputs; ok is false when one is unknown.
func (m isolationImageModel) spec(ctx context.Context, diags *diag.Diagnostics) (s image.Spec, ok bool) {
	if m.BaseImage.IsUnknown() || m.Packages.IsUnknown() || m.PackageManager.IsUnknown() || m.EnvVars.IsUnknown() {
		return s, false
	}
	s.BaseImage = m.BaseImage.ValueString()
	s.Manager = image.Manager(m.PackageManager.ValueString())
	if !m.Packages.IsNull() {
		var pkgs []types.String
		diags.Append(m.Packages.ElementsAs(ctx, &pkgs, false)...)
		for _, p := range pkgs {
			if p.IsUnknown() {
				return s, false
			}
			s.Packages = append(s.Packages, p.ValueString())
		}
	}
	if !m.EnvVars.IsNull() {
		var env map[string]types.String
		diags.Append(m.EnvVars.ElementsAs(ctx, &env, false)...)
		s.Env = map[string]string{}
		for k, v := range env {
			if v.IsUnknown() {
				return s, false
			}
			s.Env[k] = v.ValueString()
		}
		if len(s.Env) == 0 {
			s.Env = nil
		}
	}
	return s, !diags.HasError()
}

func (m *isolationImageModel) setComputedUnknown() {
	for _, v := range []*types.String{&m.ID, &m.Image, &m.ImageID, &m.IsolatedImage, &m.IsolatedImageID,
		&m.ContentHash, &m.RunnerVersion, &m.RunnerSHA256, &m.Dockerfile} {
		*v = types.StringUnknown()
	}
}

func (m *isolationImageModel) keepComputed(s isolationImageModel) {
	m.ID, m.Image, m.ImageID = s.ID, s.Image, s.ImageID
	m.IsolatedImage, m.IsolatedImageID = s.IsolatedImage, s.IsolatedImageID
	m.ContentHash, m.RunnerVersion, m.RunnerSHA256, m.Dockerfile = s.ContentHash, s.RunnerVersion, s.RunnerSHA256, s.Dockerfile
}

// setPlanned fills in what is known before building; the rest is unknown.
func (m *isolationImageModel) setPlanned(st image.State) {
	m.setComputedUnknown()
	m.Dockerfile = types.StringValue(st.Dockerfile)
	m.RunnerSHA256 = types.StringValue(st.RunnerSHA256)
	for _, f := range []struct {
		v   string
		dst *types.String
	}{{st.ContentHash, &m.ContentHash}, {st.Image, &m.Image}, {st.ImageID, &m.ImageID}, {st.Isolated, &m.IsolatedImage}} {
		if f.v != "" {
			*f.dst = types.StringValue(f.v)
		}
	}
	if st.Isolated != "" {
		m.ID = m.IsolatedImage
	}
}

// setState records a built or read-back image.
func (m *isolationImageModel) setState(st image.State) {
	m.ID = types.StringValue(st.Isolated)
	m.Image = types.StringValue(st.Image)
	m.ImageID = types.StringValue(st.ImageID)
	m.IsolatedImage = types.StringValue(st.Isolated)
	m.IsolatedImageID = types.StringValue(st.IsolatedID)
	m.ContentHash = types.StringValue(st.ContentHash)
	m.RunnerVersion = types.StringValue(st.RunnerVersion)
	m.RunnerSHA256 = types.StringValue(st.RunnerSHA256)
	m.Dockerfile = types.StringValue(st.Dockerfile)
}

// imageState is the computed half of the model as the service keeps it.
func (m isolationImageModel) imageState() image.State {
	tag := m.IsolatedImage.ValueString()
	if tag == "" {
		tag = m.ID.ValueString() // import sets the id
	}
	return image.State{
		Isolated:      tag,
		IsolatedID:    m.IsolatedImageID.ValueString(),
		Image:         m.Image.ValueString(),
		ImageID:       m.ImageID.ValueString(),
		ContentHash:   m.ContentHash.ValueString(),
		RunnerVersion: m.RunnerVersion.ValueString(),
		RunnerSHA256:  m.RunnerSHA256.ValueString(),
		Dockerfile:    m.Dockerfile.ValueString(),
	}
}

// readSpec sets the inputs from what the image was built from, keeping the
// state's package order when only the order differs.
func (m *isolationImageModel) readSpec(old, got image.Spec) {
	m.BaseImage = types.StringValue(got.BaseImage)
	m.PackageManager = types.StringValue(string(got.Manager))
	if !slices.Equal(slices.Sorted(slices.Values(old.Packages)), slices.Sorted(slices.Values(got.Packages))) {
		if len(got.Packages) == 0 {
			m.Packages = types.ListNull(types.StringType)
		} else {
			vals := make([]attr.Value, len(got.Packages))
			for i, p := range got.Packages {
				vals[i] = types.StringValue(p)
			}
			m.Packages = types.ListValueMust(types.StringType, vals)
		}
	}
	if !maps.Equal(old.Env, got.Env) {
		if len(got.Env) == 0 {
			m.EnvVars = types.MapNull(types.StringType)
		} else {
			vals := make(map[string]attr.Value, len(got.Env))
			for k, v := range got.Env {
				vals[k] = types.StringValue(v)
			}
			m.EnvVars = types.MapValueMust(types.StringType, vals)
		}
	}
}
