package provider

import (
	"context"
	"errors"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
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
					"quotes, newlines, a leading `-`) is rejected at plan time. Order does not change the image or its tag (they are hashed sorted): a reordered list plans as an in-place update of this attribute that rebuilds nothing.",
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
					"(only `env_vars` are added). Defaults to `" + string(image.ManagerAuto) + "`.",
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
					"copy); `never` uses only a local image and fails clearly when there is none. Defaults to `" + string(image.PullMissing) + "`.",
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

// service returns the image service on the provider's daemon, or nil after
// adding a diagnostic.
func (r *isolationImageResource) service(ctx context.Context, diags *diag.Diagnostics) *image.Service {
	if !requireProviderData(r.data, "meepa_isolation_image", diags) {
		return nil
	}
	cli := r.data.dockerClient(ctx, diags)
	if cli == nil {
		return nil
	}
	return image.NewService(cli, r.data.version, r.data.RunnerBinary, loggerFor(ctx))
}

// addImageError words a service error by what failed.
func addImageError(diags *diag.Diagnostics, fallback, what string, err error) {
	summary := fallback
	switch {
	case errors.Is(err, image.ErrArchMismatch):
		summary = "Wrong agent-runner Architecture"
	case errors.Is(err, image.ErrRunnerUnusable):
		summary = "Unusable agent-runner Binary"
	case errors.Is(err, image.ErrInvalidSpec):
		summary = "Invalid Isolation Image"
	case errors.Is(err, image.ErrInUse):
		summary = "Isolation Image In Use"
	case errors.Is(err, image.ErrForeign):
		summary = "Not An Isolation Image"
	case errors.Is(err, image.ErrNotFound):
		summary = "Image Not Found"
	}
	addRuntimeError(diags, summary, what, err)
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
	if r.data.kube != nil && r.data.registry == nil {
		resp.Diagnostics.AddError("No Registry For The Cluster",
			"meepa_isolation_image builds on the Docker Engine, and a cluster's nodes pull from a registry: give the provider a "+
				"registry block (address and credentials) to push to.")
		return
	}
	svc := r.service(ctx, &resp.Diagnostics)
	if svc == nil {
		return
	}
	var prior *image.Prior
	if exists {
		oldSpec, _ := state.spec(ctx, &resp.Diagnostics)
		prior = &image.Prior{Spec: oldSpec, State: r.local(state).imageState()}
	}
	p, err := svc.Plan(ctx, spec, image.Pull(plan.Pull.ValueString()), prior)
	if err != nil {
		addImageError(&resp.Diagnostics, "Cannot Plan Isolation Image", "plan "+spec.BaseImage, err)
		return
	}
	if exists && len(p.Replace) == 0 {
		plan.keepComputed(state)
		resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
		return
	}
	for _, a := range p.Replace {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root(a))
	}
	plan.setPlanned(p.State)
	r.publish(&plan, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
}

func (r *isolationImageResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan isolationImageModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	spec, _ := plan.spec(ctx, &resp.Diagnostics)
	svc := r.service(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() || svc == nil {
		return
	}
	st, warnings, err := svc.Create(ctx, spec, image.Pull(plan.Pull.ValueString()), plan.KeepLocally.ValueBool())
	if err != nil {
		addImageError(&resp.Diagnostics, "Image Build Failed", "build "+spec.BaseImage, err)
		return
	}
	for _, w := range warnings {
		resp.Diagnostics.AddWarning("Old Isolation Image Kept", w)
	}
	if p := r.pusher(ctx, &resp.Diagnostics); p != nil {
		if _, err := p.PushIsolation(ctx, st); err != nil {
			addRuntimeError(&resp.Diagnostics, "Image Push Failed", "pushing "+st.Isolated+" to "+r.data.registry.String(), err)
			return
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	plan.setState(st)
	r.publish(&plan, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	setIdentity(ctx, resp.Identity, imageIdentity{plan.IsolatedImage}, &resp.Diagnostics)
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
	// The tag names the image on every path out, a removal too (the
	// framework wants an identity after every Read without an error).
	setIdentity(ctx, resp.Identity, imageIdentity{state.IsolatedImage}, &resp.Diagnostics)
	svc := r.service(ctx, &resp.Diagnostics)
	if svc == nil {
		return
	}
	prior := r.local(state).imageState()
	obs, err := svc.Read(ctx, prior)
	if err != nil {
		addImageError(&resp.Diagnostics, "Cannot Read Isolation Image", "read "+prior.Isolated, err)
		return
	}
	if !obs.Gone && r.data.registry != nil {
		obs.Gone = !r.pushed(ctx, prior.Isolated, &resp.Diagnostics)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	if obs.Gone {
		resp.State.RemoveResource(ctx)
		return
	}
	if !obs.Foreign {
		oldSpec, _ := state.spec(ctx, &resp.Diagnostics)
		state.readSpec(oldSpec, obs.Spec)
	}
	state.setState(obs.State)
	r.publish(&state, &resp.Diagnostics)
	if state.Pull.IsNull() {
		state.Pull = types.StringValue(string(image.PullMissing))
	}
	if state.KeepLocally.IsNull() {
		state.KeepLocally = types.BoolValue(false)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
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
	setIdentity(ctx, resp.Identity, imageIdentity{plan.IsolatedImage}, &resp.Diagnostics)
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
	svc := r.service(ctx, &resp.Diagnostics)
	if svc == nil {
		return
	}
	if err := svc.Delete(ctx, spec, r.local(state).imageState()); err != nil {
		addImageError(&resp.Diagnostics, "Cannot Remove Isolation Image", "remove "+state.IsolatedImage.ValueString(), err)
	}
}

// ImportState takes the isolation image's tag, as an import ID or as the
// identity's isolated_image.
func (r *isolationImageResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	tag := importID(ctx, req, "isolated_image", &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), tag)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("isolated_image"), tag)...)
}
