package provider

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

var _ datasource.DataSourceWithConfigure = (*threegateVerifyDataSource)(nil)

// NewThreegateVerifyDataSource is the threegate_verify data source.
func NewThreegateVerifyDataSource() datasource.DataSource { return &threegateVerifyDataSource{} }

type threegateVerifyDataSource struct {
	data *providerData
}

type threegateVerifyModel struct {
	threegateVerifyInputs
	ID         types.String `tfsdk:"id"`
	Probes     types.List   `tfsdk:"probes"`
	Violations types.List   `tfsdk:"violations"`
	Table      types.String `tfsdk:"table"`
	Passed     types.Bool   `tfsdk:"passed"`
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
		Attributes: verifyDataSourceAttributes(),
	}
	for k, v := range map[string]schema.Attribute{
		"id": schema.StringAttribute{Computed: true, MarkdownDescription: "The topology name."},
		"probes": schema.ListAttribute{Computed: true, ElementType: probeObjectType,
			MarkdownDescription: "One row per check: `role`, `what`, `check` (the probe command), `expected` " +
				"(`blocked`, `open`, `allowed`, `denied`, `not-resolved`, `resolved`), `observed` (`open`, `refused`, `timeout`, " +
				"`unreachable`, `allowed`, `denied`, …), `detail` and `pass`."},
		"violations": schema.ListAttribute{Computed: true, ElementType: types.StringType,
			MarkdownDescription: "Containers attached in a way the spec forbids."},
		"table":  schema.StringAttribute{Computed: true, MarkdownDescription: "The probes as a text table."},
		"passed": schema.BoolAttribute{Computed: true, MarkdownDescription: "Every probe passed and nothing is attached wrongly (always true when reading succeeds)."},
	} {
		resp.Schema.Attributes[k] = v
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
	rep, ok := runThreegateVerify(ctx, d.data, m.threegateVerifyInputs, "data source", &resp.Diagnostics)
	if !ok {
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
