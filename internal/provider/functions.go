package provider

import (
	"context"
	"fmt"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework/function"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

// Provider functions give a module, at plan and with no API call, a value
// that a resource otherwise learns only at apply: the tags an image will
// get and the allow list a proxy will enforce. Each one calls the same code
// the resource does, so the two cannot disagree.

func (p *meepaProvider) Functions(context.Context) []func() function.Function {
	return []func() function.Function{
		func() function.Function { return isolatedImageFunction{version: p.version} },
		func() function.Function { return contentHashFunction{} },
		func() function.Function { return allowlistFunction{} },
	}
}

// isolatedImageFunction: provider::meepa::isolated_image(base_image).
type isolatedImageFunction struct{ version string }

func (isolatedImageFunction) Metadata(_ context.Context, _ function.MetadataRequest, resp *function.MetadataResponse) {
	resp.Name = "isolated_image"
}

func (isolatedImageFunction) Definition(_ context.Context, _ function.DefinitionRequest, resp *function.DefinitionResponse) {
	resp.Definition = function.Definition{
		Summary: "The isolation image tag a base image gets",
		MarkdownDescription: "The tag `meepa_isolation_image` gives its `isolated_image` when it layers the agent-runner " +
			"straight onto `base_image` (no `packages`, no `env_vars`), for this provider's version: " +
			"`meepagateway-isolated:{version}-{base}`. A base image built by the resource itself " +
			"(`meepa-sandbox:<content_hash>`) is accepted too, so `isolated_image(\"meepa-sandbox:${provider::meepa::content_hash(...)}\")` " +
			"gives the tag of an image with packages.",
		Parameters: []function.Parameter{
			function.StringParameter{Name: "base_image", MarkdownDescription: "The image reference the isolation image layers onto."},
		},
		Return: function.StringReturn{},
	}
}

func (f isolatedImageFunction) Run(ctx context.Context, req function.RunRequest, resp *function.RunResponse) {
	var base string
	if resp.Error = req.Arguments.Get(ctx, &base); resp.Error != nil {
		return
	}
	names, err := image.Plan(image.Spec{BaseImage: base}, f.version, "")
	if err != nil {
		resp.Error = function.NewArgumentFuncError(0, err.Error())
		return
	}
	resp.Error = resp.Result.Set(ctx, names.Isolated)
}

// contentHashFunction: provider::meepa::content_hash(base_image_id,
// packages, package_manager, env_vars).
type contentHashFunction struct{}

func (contentHashFunction) Metadata(_ context.Context, _ function.MetadataRequest, resp *function.MetadataResponse) {
	resp.Name = "content_hash"
}

func (contentHashFunction) Definition(_ context.Context, _ function.DefinitionRequest, resp *function.DefinitionResponse) {
	resp.Definition = function.Definition{
		Summary: "The content hash an isolation image config gets",
		MarkdownDescription: "The `content_hash` of a `meepa_isolation_image` with these packages and env vars, built on the " +
			"base image whose image id (`sha256:` and 64 hex digits, as `docker image inspect --format '{{.Id}}'` prints it) is " +
			"`base_image_id`: the hash covers the base's id, not its name, so a rebuilt base gets a new hash. The container image " +
			"is then `meepa-sandbox:<content_hash>`. Order of packages does not matter.",
		Parameters: []function.Parameter{
			function.StringParameter{Name: "base_image_id", MarkdownDescription: "The base image's id, `sha256:…`."},
			// No argument may be null: OpenTofu 1.12 sends a null argument
			// in a form the framework cannot read (measured: "DynamicValue
			// had no JSON or msgpack data set"), so [] and {} stand for none.
			function.ListParameter{Name: "packages", ElementType: types.StringType,
				MarkdownDescription: "As the resource's `packages`; `[]` for none."},
			function.StringParameter{Name: "package_manager",
				MarkdownDescription: "As the resource's `package_manager` (its default is `auto`)."},
			function.MapParameter{Name: "env_vars", ElementType: types.StringType,
				MarkdownDescription: "As the resource's `env_vars`; `{}` for none."},
		},
		Return: function.StringReturn{},
	}
}

// imageID is a local image id as the Engine reports it.
var imageIDPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func (contentHashFunction) Run(ctx context.Context, req function.RunRequest, resp *function.RunResponse) {
	var (
		id       string
		packages []string
		manager  string
		env      map[string]string
	)
	if resp.Error = req.Arguments.Get(ctx, &id, &packages, &manager, &env); resp.Error != nil {
		return
	}
	if !imageIDPattern.MatchString(id) {
		resp.Error = function.NewArgumentFuncError(0, fmt.Sprintf("base_image_id %q: want an image id, sha256: and 64 lowercase hex digits", id))
		return
	}
	spec := image.Spec{BaseImage: image.DefaultBaseImage, Packages: packages, Manager: image.Manager(manager), Env: env}
	if !spec.HasContainerLayer() {
		resp.Error = function.NewFuncError("no packages and no env_vars: such an image builds no container layer and has no content hash; " +
			"its isolation image tag is provider::meepa::isolated_image(base_image)")
		return
	}
	// Plan validates every input as the resource's build does.
	names, err := image.Plan(spec, "", id)
	if err != nil {
		resp.Error = function.NewFuncError(err.Error())
		return
	}
	resp.Error = resp.Result.Set(ctx, names.ContentHash)
}

// allowlistFunction: provider::meepa::allowlist(entries).
type allowlistFunction struct{}

func (allowlistFunction) Metadata(_ context.Context, _ function.MetadataRequest, resp *function.MetadataResponse) {
	resp.Name = "allowlist"
}

func (allowlistFunction) Definition(_ context.Context, _ function.DefinitionRequest, resp *function.DefinitionResponse) {
	resp.Definition = function.Definition{
		Summary: "The allow list an egress proxy enforces",
		MarkdownDescription: "The entries of a `threegate_network` `allow` list in the canonical form the egress proxy " +
			"enforces them: lowercase, no trailing dot, with the port (`443` when none is given), IPv6 in brackets, duplicates " +
			"dropped, order kept. An entry the proxy would refuse (a scheme, a path, a bare `*`, `*.com`, a bad port) is an " +
			"error naming its index: the parser is the one `threegate_network` checks its `allow` with at plan.",
		Parameters: []function.Parameter{
			function.ListParameter{Name: "entries", ElementType: types.StringType,
				MarkdownDescription: "Allow entries: `host`, `host:port`, `*.domain[:port]`, an IPv4 or a bracketed IPv6 literal."},
		},
		Return: function.ListReturn{ElementType: types.StringType},
	}
}

func (allowlistFunction) Run(ctx context.Context, req function.RunRequest, resp *function.RunResponse) {
	var entries []string
	if resp.Error = req.Arguments.Get(ctx, &entries); resp.Error != nil {
		return
	}
	list, err := proxy.ParseAllowlist(entries)
	if err != nil {
		resp.Error = function.NewArgumentFuncError(0, err.Error())
		return
	}
	resp.Error = resp.Result.Set(ctx, list.Strings())
}
