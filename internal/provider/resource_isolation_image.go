package provider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
)

var (
	_ resource.ResourceWithConfigure      = (*isolationImageResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*isolationImageResource)(nil)
	_ resource.ResourceWithValidateConfig = (*isolationImageResource)(nil)
	_ resource.ResourceWithImportState    = (*isolationImageResource)(nil)
)

// NewIsolationImageResource is the meepa_isolation_image resource.
func NewIsolationImageResource() resource.Resource { return &isolationImageResource{} }

type isolationImageResource struct {
	data *providerData
}

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

func (r *isolationImageResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_isolation_image"
}

func (r *isolationImageResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "An isolation image: the *container image* (`base_image` plus `packages` and `env_vars`, " +
			"built from a generated Dockerfile and tagged `meepa-sandbox:<content-hash>`) and on top of it the " +
			"*isolation image*, which adds the `agent-runner` binary, `HOME=/workspace`, `TMPDIR=/tmp` and " +
			"`WORKDIR /workspace`, tagged `meepagateway-isolated:{version}-{base}`. With no packages and no env vars " +
			"the container image is skipped and the isolation image layers straight onto the base.\n\n" +
			"Any change that alters the image (the inputs, the base image's id, a new `agent-runner` binary, an image " +
			"changed or removed out of band) replaces the resource. When a running container uses the image, " +
			"set `lifecycle { create_before_destroy = true }` so the new image exists before the old one goes.",
		Attributes: map[string]schema.Attribute{
			// Optional inputs.
			"base_image": schema.StringAttribute{
				Optional: true, Computed: true,
				Default:             stringdefault.StaticString(image.DefaultBaseImage),
				MarkdownDescription: "Base image reference. Defaults to `" + image.DefaultBaseImage + "`.",
				Validators:          []validator.String{imageReference()},
			},
			"packages": schema.ListAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Packages to install into the container image with `package_manager`. Each must be " +
					image.PackagePatternDescription + "; anything a shell would interpret (spaces, `;`, `$`, backticks, " +
					"quotes, newlines, a leading `-`) is rejected at plan time. Order does not matter.",
				Validators: []validator.List{
					listvalidator.ValueStringsAre(packageName()),
					listvalidator.UniqueValues(),
				},
			},
			"package_manager": schema.StringAttribute{
				Optional: true, Computed: true,
				Default: stringdefault.StaticString(string(image.ManagerAuto)),
				MarkdownDescription: "Package manager that installs `packages`: one of " + codeList(image.Managers) +
					". `auto` detects `apt-get`, `apk` or `dnf` in the base image at build time; `none` installs nothing " +
					"(only `env_vars` are added). Defaults to `auto`.",
				Validators: []validator.String{stringvalidator.OneOf(stringsOf(image.Managers)...)},
			},
			"env_vars": schema.MapAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Environment variables baked into the container image (Dockerfile `ENV`, values " +
					"quoted so they are taken literally). Names match `^[A-Za-z_][A-Za-z0-9_]*$`; `HOME` and `TMPDIR` are " +
					"set by the isolation image and cannot be overridden; values cannot hold newlines. They are visible " +
					"to anyone who can inspect the image: put no secrets here.",
				Validators: []validator.Map{
					mapvalidator.KeysAre(envVarName()),
					mapvalidator.ValueStringsAre(envVarValue()),
				},
			},
			"pull": schema.StringAttribute{
				Optional: true, Computed: true,
				Default: stringdefault.StaticString(string(image.PullMissing)),
				MarkdownDescription: "When to pull `base_image`: one of " + codeList(image.Pulls) + ". `missing` pulls " +
					"only when the daemon lacks it; `always` pulls before every build (plans compare against the local " +
					"copy); `never` uses only a local image and fails clearly when there is none. Defaults to `missing`.",
				Validators: []validator.String{stringvalidator.OneOf(stringsOf(image.Pulls)...)},
			},
			"keep_locally": schema.BoolAttribute{
				Optional: true, Computed: true,
				Default: booldefault.StaticBool(false),
				MarkdownDescription: "Leave the images on the daemon on destroy (and when a change replaces them). " +
					"Defaults to `false`: destroy removes both images, and fails clearly when a container still uses one.",
			},

			// Computed.
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The isolation image's tag, as `isolated_image`. Import takes it.",
			},
			"image": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "The container image: `meepa-sandbox:<content_hash>`, or `base_image` when there " +
					"are no packages and no env vars.",
			},
			"image_id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "Id (`sha256:…`) of `image`.",
			},
			"isolated_image": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "The isolation image's tag, `meepagateway-isolated:{version}-{base}`: {version} is " +
					"the provider's version and {base} is `image` with `:` and `/` replaced by `-` " +
					"(e.g. `meepagateway-isolated:0.1.0-meepa-sandbox-3f9a1c2b3d4e`).",
			},
			"isolated_image_id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "Id (`sha256:…`) of `isolated_image`.",
			},
			"content_hash": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "12 hex digits of SHA-256 over the base image's id, the packages, the env vars, " +
					"the package manager and the Dockerfile template version. Unknown until apply when the base image " +
					"is not on the daemon yet. Empty in state when the images at the tags were changed out of band " +
					"(the next plan replaces them).",
			},
			"runner_version": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "Version printed by `agent-runner version`, run once inside the freshly built " +
					"isolation image (never on the host, whose architecture may differ).",
			},
			"runner_sha256": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "SHA-256 of the `agent-runner` binary in the isolation image. A different binary " +
					"replaces the isolation image.",
			},
			"dockerfile": schema.StringAttribute{
				Computed: true,
				MarkdownDescription: "The Dockerfile generated for the container image, shown in the plan. Empty when " +
					"there are no packages and no env vars.",
			},
		},
	}
}

func (r *isolationImageResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = configureData(req.ProviderData, &resp.Diagnostics)
}

// ValidateConfig applies the rules that need two attributes: packages
// against the chosen package manager.
func (r *isolationImageResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m isolationImageModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.PackageManager.IsUnknown() || m.Packages.IsUnknown() || m.Packages.IsNull() {
		return
	}
	mgr := image.Manager(m.PackageManager.ValueString())
	if m.PackageManager.IsNull() {
		mgr = image.ManagerAuto
	}
	elems := m.Packages.Elements()
	if mgr == image.ManagerNone && len(elems) > 0 {
		resp.Diagnostics.AddAttributeError(path.Root("packages"), "Packages Without A Package Manager",
			`package_manager is "none", which installs nothing; remove packages or choose one of `+codeList(image.Managers)+".")
		return
	}
	for i, e := range elems {
		s, ok := e.(types.String)
		if !ok || s.IsNull() || s.IsUnknown() {
			continue
		}
		if err := image.ValidatePackage(mgr, s.ValueString()); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("packages").AtListIndex(i), "Invalid Package Name", err.Error()+".")
		}
	}
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

// runner resolves the agent-runner binary for the daemon's architecture,
// checks it can run there, and hashes it.
func (r *isolationImageResource) runner(ctx context.Context, b *image.Builder) (image.Binary, error) {
	osName, arch, err := b.DaemonPlatform(ctx)
	if err != nil {
		return image.Binary{}, err
	}
	if osName != "linux" {
		return image.Binary{}, fmt.Errorf("the Docker daemon runs %s containers; isolation images need a Linux daemon", osName)
	}
	p, err := r.data.RunnerBinary(arch)
	if err != nil {
		return image.Binary{}, err
	}
	bin, err := image.InspectBinary(p)
	if err != nil {
		return image.Binary{}, err
	}
	return bin, bin.CheckArch(arch)
}

func (r *isolationImageResource) builder(ctx context.Context, diags *diag.Diagnostics) *image.Builder {
	if !requireProviderData(r.data, "meepa_isolation_image", diags) {
		return nil
	}
	cli := r.data.dockerClient(ctx, diags)
	if cli == nil {
		return nil
	}
	return image.NewBuilder(cli)
}

// ModifyPlan shows what apply will make: the Dockerfile always (when the
// inputs are known), the tags and hash when the base image is on the daemon,
// and a replacement whenever the image would come out different from the one
// in state (inputs, base id, runner binary, version, or images changed out
// of band, which Read leaves visible as an empty content_hash).
func (r *isolationImageResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.data == nil {
		return
	}
	var plan, state isolationImageModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	exists := !req.State.Raw.IsNull()
	if exists {
		resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	spec, known := plan.spec(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	if !known {
		plan.setComputedUnknown()
		if exists {
			for _, p := range []string{"base_image", "packages", "package_manager", "env_vars"} {
				resp.RequiresReplace = append(resp.RequiresReplace, path.Root(p))
			}
		}
		resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
		return
	}
	if err := spec.Validate(); err != nil {
		resp.Diagnostics.AddError("Invalid Isolation Image", err.Error())
		return
	}

	b := r.builder(ctx, &resp.Diagnostics)
	if b == nil {
		return
	}
	bin, err := r.runner(ctx, b)
	if err != nil {
		resp.Diagnostics.AddError("Unusable agent-runner Binary", err.Error())
		return
	}
	baseID, err := b.BaseID(ctx, spec.BaseImage)
	if err != nil {
		addRuntimeError(&resp.Diagnostics, "Cannot Inspect Base Image", "inspect "+spec.BaseImage, err)
		return
	}
	if !exists && image.Pull(plan.Pull.ValueString()) == image.PullAlways {
		baseID = "" // the pull at apply may bring another image
	}
	names, err := image.Plan(spec, r.data.version, baseID)
	if err != nil {
		resp.Diagnostics.AddError("Invalid Isolation Image", err.Error())
		return
	}

	if exists {
		oldSpec, _ := state.spec(ctx, &resp.Diagnostics)
		replace := replaceReasons(spec, oldSpec, state, names, bin, baseID)
		if len(replace) == 0 {
			plan.keepComputed(state)
			resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
			return
		}
		tflog.Info(ctx, "isolation image will be replaced", map[string]any{"reasons": fmt.Sprint(replace)})
		resp.RequiresReplace = append(resp.RequiresReplace, replace...)
	}
	plan.setPlanned(spec, names, bin, baseID)
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
}

// replaceReasons names the attributes whose change makes a new image.
func replaceReasons(spec, old image.Spec, state isolationImageModel, n image.Names, bin image.Binary, baseID string) []path.Path {
	var p []path.Path
	if spec.BaseImage != old.BaseImage {
		p = append(p, path.Root("base_image"))
	}
	if !slices.Equal(sorted(spec.Packages), sorted(old.Packages)) {
		p = append(p, path.Root("packages"))
	}
	if spec.Manager != old.Manager {
		p = append(p, path.Root("package_manager"))
	}
	if !maps(spec.Env, old.Env) {
		p = append(p, path.Root("env_vars"))
	}
	// With the base gone from the daemon the images in state still stand;
	// only a base that is there and different forces a rebuild.
	if baseID != "" && n.ContentHash != state.ContentHash.ValueString() {
		p = append(p, path.Root("content_hash"))
	}
	if baseID == "" && state.ContentHash.ValueString() == "" {
		p = append(p, path.Root("content_hash")) // changed out of band
	}
	if bin.SHA256 != state.RunnerSHA256.ValueString() {
		p = append(p, path.Root("runner_sha256"))
	}
	if n.Isolated != "" && n.Isolated != state.IsolatedImage.ValueString() {
		p = append(p, path.Root("isolated_image"))
	}
	return p
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
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
func (m *isolationImageModel) setPlanned(spec image.Spec, n image.Names, bin image.Binary, baseID string) {
	m.setComputedUnknown()
	m.Dockerfile = types.StringValue(n.Dockerfile)
	m.RunnerSHA256 = types.StringValue(bin.SHA256)
	if n.ContentHash != "" {
		m.ContentHash = types.StringValue(n.ContentHash)
	}
	if n.Image != "" {
		m.Image = types.StringValue(n.Image)
	}
	if n.Isolated != "" {
		m.IsolatedImage = types.StringValue(n.Isolated)
		m.ID = m.IsolatedImage
	}
	if !spec.HasContainerLayer() && baseID != "" {
		m.ImageID = types.StringValue(baseID)
	}
}

func (m *isolationImageModel) setResult(res image.Result) {
	m.ID = types.StringValue(res.Isolated)
	m.Image = types.StringValue(res.Image)
	m.ImageID = types.StringValue(res.ImageID)
	m.IsolatedImage = types.StringValue(res.Isolated)
	m.IsolatedImageID = types.StringValue(res.IsolatedID)
	m.ContentHash = types.StringValue(res.ContentHash)
	m.RunnerVersion = types.StringValue(res.RunnerVersion)
	m.RunnerSHA256 = types.StringValue(res.RunnerSHA256)
	m.Dockerfile = types.StringValue(res.Dockerfile)
}

func (r *isolationImageResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan isolationImageModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	spec, _ := plan.spec(ctx, &resp.Diagnostics)
	b := r.builder(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() || b == nil {
		return
	}
	bin, err := r.runner(ctx, b)
	if err != nil {
		resp.Diagnostics.AddError("Unusable agent-runner Binary", err.Error())
		return
	}
	tflog.Info(ctx, "building isolation image", map[string]any{"base_image": spec.BaseImage, "runner": bin.Path})
	res, err := b.Build(ctx, image.Request{
		Spec:    spec,
		Pull:    image.Pull(plan.Pull.ValueString()),
		Version: r.data.version,
		Runner:  bin,
		OnLog: func(line string) {
			tflog.Info(ctx, "docker build output", map[string]any{"base_image": spec.BaseImage, "line": line})
		},
		KeepOld: plan.KeepLocally.ValueBool(),
	})
	if err != nil {
		summary := "Image Build Failed"
		if errors.Is(err, image.ErrArchMismatch) {
			summary = "Wrong agent-runner Architecture"
		}
		resp.Diagnostics.AddError(summary, err.Error())
		return
	}
	for _, w := range res.Warnings {
		resp.Diagnostics.AddWarning("Old Isolation Image Kept", w)
	}
	plan.setResult(res)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// Read reads the images back as they are. Either image gone: the resource
// leaves the state, so the next plan builds it again. An image at the tag
// that this provider did not build (or whose container image moved) keeps
// its id in state with an empty content_hash, and the plan replaces it.
func (r *isolationImageResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state isolationImageModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b := r.builder(ctx, &resp.Diagnostics)
	if b == nil {
		return
	}
	tag := state.IsolatedImage.ValueString()
	if tag == "" {
		tag = state.ID.ValueString()
	}
	importing := state.IsolatedImageID.IsNull()
	obs, err := b.Read(ctx, tag)
	if errors.Is(err, image.ErrNotFound) {
		if importing {
			resp.Diagnostics.AddError("Image Not Found", fmt.Sprintf("There is no image %s on the Docker daemon to import.", tag))
			return
		}
		tflog.Info(ctx, "isolation image is gone; removing it from state", map[string]any{"tag": tag})
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addRuntimeError(&resp.Diagnostics, "Cannot Read Isolation Image", "read "+tag, err)
		return
	}
	if importing && !obs.Managed {
		resp.Diagnostics.AddError("Not An Isolation Image",
			fmt.Sprintf("%s was not built by this provider (it has no %s labels); import takes the isolated_image tag of a meepa_isolation_image.", tag, "io.meepa."))
		return
	}

	state.ID = types.StringValue(tag)
	state.IsolatedImage = types.StringValue(tag)
	if !obs.Managed {
		// Someone else's image at our tag. The id in state stays that of
		// our image, which Delete still has to remove; the empty hash makes
		// the next plan replace.
		tflog.Warn(ctx, "isolation tag points at an image this provider did not build", map[string]any{"tag": tag, "id": obs.IsolatedID})
		state.ContentHash = types.StringValue("")
		resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
		return
	}
	state.IsolatedImageID = types.StringValue(obs.IsolatedID)

	oldSpec, _ := state.spec(ctx, &resp.Diagnostics)
	state.readSpec(oldSpec, obs.Spec)
	if obs.Spec.HasContainerLayer() {
		if obs.ImageID == "" {
			tflog.Info(ctx, "container image is gone; removing the isolation image from state", map[string]any{"tag": obs.Image})
			resp.State.RemoveResource(ctx)
			return
		}
		state.ImageID = types.StringValue(obs.ImageID)
	} else {
		state.ImageID = types.StringValue(obs.BaseImageID)
	}
	state.Image = types.StringValue(obs.Image)
	state.ContentHash = types.StringValue(obs.ContentHash)
	if obs.Spec.HasContainerLayer() && obs.ImageContentHash != obs.ContentHash {
		state.ContentHash = types.StringValue("") // the container tag moved
	}
	state.RunnerSHA256 = types.StringValue(obs.RunnerSHA256)
	if names, err := image.Plan(obs.Spec, r.data.version, ""); err == nil {
		state.Dockerfile = types.StringValue(names.Dockerfile)
	}
	if state.RunnerVersion.ValueString() == "" {
		bin := image.Binary{}
		v, err := b.RunnerVersion(ctx, obs.IsolatedID, bin)
		if err != nil {
			addRuntimeError(&resp.Diagnostics, "Cannot Run agent-runner", "agent-runner version in "+tag, err)
			return
		}
		state.RunnerVersion = types.StringValue(v)
	}
	if state.Pull.IsNull() {
		state.Pull = types.StringValue(string(image.PullMissing))
	}
	if state.KeepLocally.IsNull() {
		state.KeepLocally = types.BoolValue(false)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// readSpec sets the inputs from what the image was built from, keeping the
// state's package order when only the order differs.
func (m *isolationImageModel) readSpec(old, got image.Spec) {
	m.BaseImage = types.StringValue(got.BaseImage)
	m.PackageManager = types.StringValue(string(got.Manager))
	if !slices.Equal(sorted(old.Packages), sorted(got.Packages)) {
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
	if !maps(old.Env, got.Env) {
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

// Update only records inputs that do not change the image (pull,
// keep_locally, package order); everything else replaces.
func (r *isolationImageResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state isolationImageModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.keepComputed(state)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *isolationImageResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state isolationImageModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if state.KeepLocally.ValueBool() {
		tflog.Info(ctx, "keep_locally: leaving the images on the daemon", map[string]any{"tag": state.IsolatedImage.ValueString()})
		return
	}
	spec, _ := state.spec(ctx, &resp.Diagnostics)
	b := r.builder(ctx, &resp.Diagnostics)
	if b == nil {
		return
	}
	t := image.Target{Isolated: state.IsolatedImage.ValueString(), IsolatedID: state.IsolatedImageID.ValueString()}
	if spec.HasContainerLayer() {
		t.Container, t.ContainerID = state.Image.ValueString(), state.ImageID.ValueString()
	}
	if err := b.Delete(ctx, t); err != nil {
		summary := "Cannot Remove Isolation Image"
		if errors.Is(err, image.ErrInUse) {
			summary = "Isolation Image In Use"
		}
		resp.Diagnostics.AddError(summary, fmt.Sprintf("Removing %s: %v", t.Isolated, err))
	}
}

func (r *isolationImageResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("isolated_image"), req.ID)...)
}
