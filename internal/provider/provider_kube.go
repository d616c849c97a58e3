package provider

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubedeploy"
)

// kubernetesModel is the provider's kubernetes block.
type kubernetesModel struct {
	ConfigPath types.String `tfsdk:"config_path"`
	Context    types.String `tfsdk:"context"`
	Namespace  types.String `tfsdk:"namespace"`
	APIServer  types.String `tfsdk:"api_server"`
	Admission  types.Bool   `tfsdk:"runner_admission_policy"`
}

// registryModel is the provider's registry block.
type registryModel struct {
	Address  types.String `tfsdk:"address"`
	Username types.String `tfsdk:"username"`
	Password types.String `tfsdk:"password"`
	Token    types.String `tfsdk:"token"`
	Insecure types.Bool   `tfsdk:"insecure"`
}

func kubernetesSchema() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "Run on a Kubernetes cluster instead of a Docker host: agents' runners become Deployments, " +
			"their messages fresh hardened Pods, the ThreeGate topology NetworkPolicies and a proxy Deployment. " +
			"Exclusive with `docker_host`. Images are still built by the Docker Engine that `DOCKER_HOST` (or the local " +
			"socket) names, and reach the nodes through `registry`.",
		Attributes: map[string]schema.Attribute{
			"config_path": schema.StringAttribute{Optional: true,
				MarkdownDescription: "A kubeconfig file. Defaults to what kubectl reads: `KUBECONFIG`, else `~/.kube/config`."},
			"context": schema.StringAttribute{Optional: true,
				MarkdownDescription: "A context of the kubeconfig. Defaults to its current context."},
			"namespace": schema.StringAttribute{Optional: true, Validators: []validator.String{dnsLabel()},
				MarkdownDescription: "The namespace every object goes to (it must exist). Defaults to the context's namespace, else `" +
					kube.DefaultNamespace + "`."},
			"api_server": schema.StringAttribute{Optional: true, Validators: []validator.String{hostPortAddr()},
				MarkdownDescription: "`host:port` at which pods reach the API server, for clusters whose `kubernetes` Service has no data " +
					"plane (no kube-proxy). Defaults to what the kubelet tells every pod."},
			"runner_admission_policy": schema.BoolAttribute{Optional: true,
				MarkdownDescription: "Whether agents' runners are confined by the ValidatingAdmissionPolicy `" + kubedeploy.AdmissionPolicyPrefix +
					"-<version>` and its binding, which the provider applies (cluster-scoped: it needs the right to make both; the " +
					"version is a hash of the rules, so runners made by different provider releases each keep theirs, and a version " +
					"no runner uses any more is removed). With it the API " +
					"server lets a runner's ServiceAccount create only its own agent's hardened message pods (its labels, role, image, " +
					"workspace claim, no Secret or token volumes) and delete and attach to those only. Default `true`: a plan for an " +
					"agent on a cluster without `admissionregistration.k8s.io/v1` (Kubernetes before 1.30) is refused. `false` is the " +
					"operator's word that the namespace is one trust domain: a runner whose pod is taken over may then create any pod " +
					"there, read every agent's Secret and act as any runner. It is a provider setting, not an agent's, because the " +
					"policy guards every agent of the cluster against every other: one agent cannot opt out alone."},
		},
	}
}

func registrySchema() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "Where `meepa_isolation_image` pushes its images so that a cluster's nodes can pull them; " +
			"needed with `kubernetes` for every image the provider builds. `meepa_isolation_image.isolated_image` then names " +
			"the image in this registry.",
		Attributes: map[string]schema.Attribute{
			"address": schema.StringAttribute{Required: true,
				MarkdownDescription: "`host[:port]` with an optional path prefix, e.g. `registry.example.com/agents`. No scheme."},
			"username": schema.StringAttribute{Optional: true, MarkdownDescription: "User for Basic authentication, with `password`."},
			"password": schema.StringAttribute{Optional: true, Sensitive: true, MarkdownDescription: "Password for `username`."},
			"token":    schema.StringAttribute{Optional: true, Sensitive: true, MarkdownDescription: "A bearer token; exclusive with `username`."},
			"insecure": schema.BoolAttribute{Optional: true,
				MarkdownDescription: "Plain HTTP, for a test registry. Without it every request uses TLS, also on loopback."},
		},
	}
}

// kubeSettings are the kubernetes and registry blocks as Configure read
// them; nil kubernetes means the Docker backend.
type kubeSettings struct {
	cfg       kube.Config
	apiServer string
	// skipAdmission is runner_admission_policy = false.
	skipAdmission bool
	mu            sync.Mutex
	cli           *kube.Client
}

// Client connects on first use (kube.Connect reads the kubeconfig; the
// cluster is contacted by the first call).
func (k *kubeSettings) Client() (*kube.Client, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cli != nil {
		return k.cli, nil
	}
	c, err := kube.Connect(k.cfg)
	if err != nil {
		return nil, err
	}
	k.cli = c
	return c, nil
}

// readBackend reads the kubernetes and registry blocks, checking what spans
// them and docker_host.
func readBackend(ctx context.Context, cfg providerModel, diags *diag.Diagnostics) (*kubeSettings, *kube.RegistryConfig) {
	var k *kubeSettings
	if !cfg.Kubernetes.IsNull() {
		var m kubernetesModel
		diags.Append(cfg.Kubernetes.As(ctx, &m, objectAsOpts)...)
		if !cfg.DockerHost.IsNull() {
			diags.AddAttributeError(path.Root("kubernetes"), "Two Backends",
				"kubernetes and docker_host both say where agents run; set one. (Images are built by the Docker Engine of "+
					"DOCKER_HOST or the local socket either way.)")
		}
		k = &kubeSettings{
			cfg:       kube.Config{ConfigPath: m.ConfigPath.ValueString(), Context: m.Context.ValueString(), Namespace: m.Namespace.ValueString()},
			apiServer: m.APIServer.ValueString(),
			// Unset is true: confined unless the operator says otherwise.
			skipAdmission: !m.Admission.IsNull() && !m.Admission.ValueBool(),
		}
	}
	var reg *kube.RegistryConfig
	if !cfg.Registry.IsNull() {
		var m registryModel
		diags.Append(cfg.Registry.As(ctx, &m, objectAsOpts)...)
		reg = &kube.RegistryConfig{
			Address: m.Address.ValueString(), Username: m.Username.ValueString(), Password: m.Password.ValueString(),
			Token: m.Token.ValueString(), Insecure: m.Insecure.ValueBool(),
		}
		addErrors(diags, reg.Validate(), "Invalid Registry", "", nil)
	}
	return k, reg
}

// knownObject reports whether every attribute of an object is known, adding
// an error on attr when one is not: the provider is configured once.
func knownObject(o types.Object, attr string, diags *diag.Diagnostics) {
	if o.IsNull() {
		return
	}
	if o.IsUnknown() || anyUnknown(o.Attributes()) {
		diags.AddAttributeError(path.Root(attr), "Unknown Provider Setting",
			"The provider needs "+attr+" to be known when it is configured; set it from values known before apply.")
	}
}

func anyUnknown(attrs map[string]attr.Value) bool {
	for _, v := range attrs {
		if v.IsUnknown() {
			return true
		}
	}
	return false
}

// dnsLabel checks a namespace name.
func dnsLabel() validator.String {
	return stringCheck{
		summary: "Invalid Namespace",
		desc:    "a DNS label (lower case letters, digits and '-', at most 63)",
		check: func(s string) error {
			if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
				return fmt.Errorf("%q is not a namespace name: %s", s, errs[0])
			}
			return nil
		},
	}
}

// checkHostPort says why s is not host:port with a TCP port, suggesting
// example.
func checkHostPort(s, example string) error {
	host, port, err := net.SplitHostPort(s)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q is not host:port; write e.g. %q", s, example)
	}
	return nil
}

// hostPortAddr checks a host:port.
func hostPortAddr() validator.String {
	return stringCheck{
		summary: "Invalid Address",
		desc:    "`host:port`",
		check:   func(s string) error { return checkHostPort(s, "10.0.0.1:6443") },
	}
}
