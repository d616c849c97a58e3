package provider

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

var _ datasource.DataSourceWithConfigure = (*threegateVerifyDataSource)(nil)

// NewThreegateVerifyDataSource is the threegate_verify data source.
func NewThreegateVerifyDataSource() datasource.DataSource { return &threegateVerifyDataSource{} }

type threegateVerifyDataSource struct {
	data *providerData
}

type threegateVerifyModel struct {
	ID             types.String `tfsdk:"id"`
	Name           types.String `tfsdk:"name"`
	ProbeImage     types.String `tfsdk:"probe_image"`
	AllowedTarget  types.String `tfsdk:"allowed_target"`
	DeniedTarget   types.String `tfsdk:"denied_target"`
	OutsideAddress types.String `tfsdk:"outside_address"`
	DNSName        types.String `tfsdk:"dns_name"`
	HostPort       types.Int64  `tfsdk:"host_port"`
	TimeoutSeconds types.Int64  `tfsdk:"timeout_seconds"`
	Probes         types.List   `tfsdk:"probes"`
	Violations     types.List   `tfsdk:"violations"`
	Table          types.String `tfsdk:"table"`
	Passed         types.Bool   `tfsdk:"passed"`
}

var probeObjectType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"role": types.StringType, "what": types.StringType, "check": types.StringType, "expected": types.StringType,
	"observed": types.StringType, "detail": types.StringType, "pass": types.BoolType,
}}

func (d *threegateVerifyDataSource) Metadata(_ context.Context, _ datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = "threegate_verify"
}

func (d *threegateVerifyDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Proves a ThreeGate topology isolates: runs short-lived, hardened probe containers in each role " +
			"(CORE on llmnet; FETCH on llmnet and fetchnet with the proxy env; TOOL_EXEC on llmnet; TOOL_EXEC's sandbox with " +
			"network `none`) and reports what each can reach — the proxy, an allowed host through the proxy, a disallowed host, " +
			"an address outside the topology, the host through each bridge gateway, DNS — against what the spec allows. It also " +
			"lists containers attached in a way the spec forbids (anything but the proxy on egressnet, a container on fetchnet " +
			"without llmnet, a container labelled `io.meepa.threegate.role` on a network its role must not join). Reading " +
			"fails when any probe differs or any attachment is forbidden. Served by provider `meepa`: write `provider = meepa`, " +
			"and `depends_on` the `threegate_network`. Targets left out are not probed: nothing is sent anywhere unnamed.",
		Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{Required: true, MarkdownDescription: "Name of the `threegate_network` topology."},
			"probe_image": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Image to run the probes in; it must contain `/usr/local/bin/agent-runner`. Defaults to the proxy's image."},
			"allowed_target": schema.StringAttribute{Optional: true, Validators: []validator.String{hostPort()},
				MarkdownDescription: "A `host:port` the allowlist admits: FETCH must get a tunnel to it through the proxy. " +
					"When the host is an IP address, CORE and FETCH also dial it directly and must fail (the firewall opens its port " +
					"for the proxy's egress only)."},
			"denied_target": schema.StringAttribute{Optional: true, Validators: []validator.String{hostPort()},
				MarkdownDescription: "A `host:port` the allowlist does not admit: the proxy must answer 403."},
			"outside_address": schema.StringAttribute{Optional: true, Validators: []validator.String{ipPort()},
				MarkdownDescription: "An `ip:port` outside the topology, not in the allowlist: no member may reach it directly, and the proxy must refuse it."},
			"dns_name": schema.StringAttribute{Optional: true,
				MarkdownDescription: "A name outside the topology that every role must fail to resolve (its `DNS outside name` row; each role also " +
					"resolves its probe's own name, which must work). Defaults to `" + topospec.DefaultVerifyDNSName + "`. The probes get their role's " +
					"DNS settings, so the query goes only to the topology's DNS sink on llmnet and never leaves the host, on every engine version. " +
					"When it is set and the topology's proxy has `dns` servers, CORE and FETCH also ask the first of them for this name directly, " +
					"over UDP and TCP port 53, which must fail: port 53 is open for the proxy only. On a cluster every probe pod has no " +
					"resolver (its resolv.conf names only its own loopback, as a member's does), resolves its own name from /etc/hosts, and " +
					"also asks the cluster's DNS Service (kube-system/kube-dns) directly over UDP and TCP port 53, which must fail."},
			"host_port": schema.Int64Attribute{Optional: true, Validators: []validator.Int64{int64validator.Between(1, 65535)},
				MarkdownDescription: "Port tried on each bridge gateway (the host), 1 to 65535; any answer, even a reset, counts as reachable. Defaults to " +
					strconv.Itoa(topospec.DefaultVerifyHostPort) + "."},
			"timeout_seconds": schema.Int64Attribute{Optional: true, Validators: []validator.Int64{int64validator.Between(1, topospec.MaxVerifyTimeoutSeconds)},
				MarkdownDescription: fmt.Sprintf("Seconds allowed per check, 1 to %d; a check that times out counts as blocked. Defaults to %d.",
					topospec.MaxVerifyTimeoutSeconds, topospec.DefaultVerifyTimeoutSeconds)},

			"id": schema.StringAttribute{Computed: true, MarkdownDescription: "The topology name."},
			"probes": schema.ListAttribute{Computed: true, ElementType: probeObjectType,
				MarkdownDescription: "One row per check: `role`, `what`, `check` (the probe command), `expected` " +
					"(`blocked`, `open`, `allowed`, `denied`, `not-resolved`, `resolved`), `observed` (`open`, `refused`, `timeout`, " +
					"`unreachable`, `allowed`, `denied`, …), `detail` and `pass`."},
			"violations": schema.ListAttribute{Computed: true, ElementType: types.StringType,
				MarkdownDescription: "Containers attached in a way the spec forbids."},
			"table":  schema.StringAttribute{Computed: true, MarkdownDescription: "The probes as a text table."},
			"passed": schema.BoolAttribute{Computed: true, MarkdownDescription: "Every probe passed and nothing is attached wrongly (always true when reading succeeds)."},
		},
	}
}

func (d *threegateVerifyDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.data = configureData(req.ProviderData, &resp.Diagnostics)
}

func (d *threegateVerifyDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m threegateVerifyModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !requireProviderData(d.data, "threegate_verify", &resp.Diagnostics) {
		return
	}
	name := m.Name.ValueString()
	opts := topospec.VerifyOptions{
		Image: m.ProbeImage.ValueString(), AllowedTarget: m.AllowedTarget.ValueString(), DeniedTarget: m.DeniedTarget.ValueString(),
		OutsideAddress: m.OutsideAddress.ValueString(), DNSName: m.DNSName.ValueString(), HostPort: int(m.HostPort.ValueInt64()),
		Timeout: time.Duration(m.TimeoutSeconds.ValueInt64()) * time.Second,
	}
	rep, err := d.verify(ctx, name, opts, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	if err != nil {
		addRuntimeError(&resp.Diagnostics, "ThreeGate Verification Failed", "running probe containers for "+name, err)
		return
	}
	if !rep.OK() {
		resp.Diagnostics.AddError("ThreeGate Isolation Differs From The Spec",
			fmt.Sprintf("Topology %q does not isolate as the spec requires:\n\n%s", name, rep.Table()))
		return
	}
	type probeModel struct {
		Role     string `tfsdk:"role"`
		What     string `tfsdk:"what"`
		Check    string `tfsdk:"check"`
		Expected string `tfsdk:"expected"`
		Observed string `tfsdk:"observed"`
		Detail   string `tfsdk:"detail"`
		Pass     bool   `tfsdk:"pass"`
	}
	rows := make([]probeModel, 0, len(rep.Probes))
	for _, p := range rep.Probes {
		rows = append(rows, probeModel(p))
	}
	var d1, d2 diag.Diagnostics
	m.Probes, d1 = types.ListValueFrom(ctx, probeObjectType, rows)
	m.Violations, d2 = types.ListValueFrom(ctx, types.StringType, orEmpty(rep.Violations))
	resp.Diagnostics.Append(append(d1, d2...)...)
	m.ID, m.Table, m.Passed = types.StringValue(name), types.StringValue(rep.Table()), types.BoolValue(true)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// verify finds the topology on the provider's backend and runs its probes
// there: containers on a Docker host, pods on a cluster.
func (d *threegateVerifyDataSource) verify(ctx context.Context, name string, opts topospec.VerifyOptions, diags *diag.Diagnostics) (topospec.Report, error) {
	b := topologyBackend(ctx, d.data)
	spec, err := b.Import(ctx, name)
	var nf *topospec.NotFoundError
	switch {
	case errors.As(err, &nf):
		diags.AddAttributeError(path.Root("name"), "ThreeGate Topology Not Found",
			fmt.Sprintf("Reading topology %q from %s: %v\n\nName a threegate_network that exists, and give this data source "+
				"depends_on = [threegate_network.<name>] so that it is read after the topology is made.", name, nf.Where, nf.Err))
		return topospec.Report{}, nil
	case err != nil:
		addFailure(diags, err, "ThreeGate Topology Invalid", "reading topology "+name)
		return topospec.Report{}, nil
	}
	return b.Verify(ctx, spec, opts)
}

// hostPort checks a probe target: a host name or IP and a TCP port.
func hostPort() validator.String {
	return stringCheck{
		summary: "Invalid Probe Target",
		desc:    "`host:port` with a port from 1 to 65535",
		check:   func(s string) error { return checkHostPort(s, "api.example.com:443") },
	}
}

// ipPort checks an address probed directly: an IP and a TCP port (no name,
// so that nothing is resolved on the way).
func ipPort() validator.String {
	return stringCheck{
		summary: "Invalid Probe Address",
		desc:    "`ip:port` with a port from 1 to 65535",
		check: func(s string) error {
			ap, err := netip.ParseAddrPort(s)
			if err != nil || ap.Port() == 0 {
				return fmt.Errorf("%q is not ip:port; write e.g. \"192.0.2.10:443\" (or \"[2001:db8::1]:443\")", s)
			}
			return nil
		},
	}
}
