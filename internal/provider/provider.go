// Package provider is the Terraform glue of the meepa provider: schemas,
// models, CRUD and validators. Everything that touches Docker, iptables or
// Landlock lives in internal/runtime; this package only translates.
package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/docker/docker/client"
	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
)

// Address is the provider's source address.
const Address = "registry.terraform.io/bogpad/meepa"

var (
	_ provider.Provider                  = (*meepaProvider)(nil)
	_ provider.ProviderWithFunctions     = (*meepaProvider)(nil)
	_ provider.ProviderWithListResources = (*meepaProvider)(nil)
	_ provider.ProviderWithActions       = (*meepaProvider)(nil)
)

// New returns the provider factory for the given version.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &meepaProvider{version: version} }
}

type meepaProvider struct {
	version string
}

type providerModel struct {
	DockerHost   types.String `tfsdk:"docker_host"`
	StateDir     types.String `tfsdk:"state_dir"`
	RunnerBinary types.String `tfsdk:"runner_binary"`
	Kubernetes   types.Object `tfsdk:"kubernetes"`
	Registry     types.Object `tfsdk:"registry"`
}

func (p *meepaProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "meepa"
	resp.Version = p.version
}

func (p *meepaProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Turns one Docker host into a safe home for AI agents: isolation images, " +
			"the ThreeGate network topology with its host firewall, and agents with their running `agent-runner` service.",
		Attributes: map[string]schema.Attribute{
			"docker_host": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Docker daemon address, e.g. `unix:///var/run/docker.sock` or `tcp://10.0.0.2:2376`: " +
					dockerHost().Description(context.Background()) + ". " +
					"Defaults to `DOCKER_HOST`, else the local socket. TLS material is read from `DOCKER_CERT_PATH` " +
					"and `DOCKER_TLS_VERIFY`, as the Docker CLI does.",
				Validators: []validator.String{dockerHost()},
			},
			"state_dir": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Directory for agent workspaces (`<state_dir>/agents/<agent_id>/`) and runner " +
					"configuration. Defaults to `~/.meepagateway`. Must be an absolute path.",
				Validators: []validator.String{absolutePath()},
			},
			"runner_binary": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Path of the Linux `agent-runner` binary layered into isolation images. Defaults to " +
					"`MEEPA_AGENT_RUNNER`, then `agent-runner-linux-<arch>` or `agent-runner` beside the provider " +
					"executable, then `agent-runner` on `PATH`.",
			},
			"kubernetes": kubernetesSchema(),
			"registry":   registrySchema(),
		},
	}
}

func (p *meepaProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for attr, v := range map[string]types.String{"docker_host": cfg.DockerHost, "state_dir": cfg.StateDir, "runner_binary": cfg.RunnerBinary} {
		if v.IsUnknown() {
			resp.Diagnostics.AddAttributeError(path.Root(attr), "Unknown Provider Setting",
				"The provider needs "+attr+" to be known when it is configured; set it from a value known before apply.")
		}
	}
	knownObject(cfg.Kubernetes, "kubernetes", &resp.Diagnostics)
	knownObject(cfg.Registry, "registry", &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	kubeCfg, registry := readBackend(ctx, cfg, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}

	stateDir := cfg.StateDir.ValueString()
	if stateDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("state_dir"), "No Home Directory",
				"state_dir is not set and the home directory is unknown: "+err.Error()+". Set state_dir.")
			return
		}
		stateDir = filepath.Join(home, ".meepagateway")
	}

	data := &providerData{
		version:      p.version,
		docker:       newLazyDocker(engine.Options{Host: cfg.DockerHost.ValueString()}),
		stateDir:     filepath.Clean(stateDir),
		runnerBinary: cfg.RunnerBinary.ValueString(),
		kube:         kubeCfg,
		registry:     registry,
		run:          newPlanRun(),
	}
	data.pickBackends()
	resp.ResourceData = data
	resp.DataSourceData = data
	resp.ListResourceData = data
	resp.ActionData = data
	resp.EphemeralResourceData = data
}

func (p *meepaProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		NewThreegateNetworkResource,
		NewIsolationImageResource,
		NewAgentResource,
	}
}

// ListResources are what `terraform query` lists (Terraform 1.14+).
func (p *meepaProvider) ListResources(context.Context) []func() list.ListResource {
	return []func() list.ListResource{
		NewAgentListResource,
		NewTopologyListResource,
		NewIsolationImageListResource,
	}
}

// EphemeralResources are values made for one run and never stored in a
// plan or state (Terraform 1.10+).
func (p *meepaProvider) EphemeralResources(context.Context) []func() ephemeral.EphemeralResource {
	return []func() ephemeral.EphemeralResource{NewAgentTokenEphemeral}
}

// Actions are what an apply can run beside its changes (Terraform 1.14+).
func (p *meepaProvider) Actions(context.Context) []func() action.Action {
	return []func() action.Action{
		NewAgentMessageAction,
		NewThreegateVerifyAction,
		NewImagePruneAction,
	}
}

func (p *meepaProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{
		NewThreegateVerifyDataSource,
	}
}

// dockerHostSchemes are the address schemes the Docker client connects to
// by itself (ssh:// needs the Docker CLI's connection helper).
var dockerHostSchemes = []string{"unix", "tcp"}

// dockerHost checks docker_host at plan time, so a typo is an error on the
// attribute rather than "daemon unreachable" at the first Docker call.
func dockerHost() validator.String {
	return stringCheck{
		summary: "Invalid Docker Host",
		desc:    "a URL with scheme " + codeList(dockerHostSchemes),
		check: func(s string) error {
			u, err := client.ParseHostURL(s)
			if err != nil || !slices.Contains(dockerHostSchemes, u.Scheme) {
				return fmt.Errorf("%q is not a Docker daemon address; write unix:///<socket path> or tcp://<host>:<port>", s)
			}
			return nil
		},
	}
}
