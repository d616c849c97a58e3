package provider

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	actionschema "github.com/hashicorp/terraform-plugin-framework/action/schema"
	dsschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// threegateVerifyInputs is what the threegate_verify data source and the
// threegate_verify action both take: the topology and how to probe it.
type threegateVerifyInputs struct {
	Name           types.String `tfsdk:"name"`
	ProbeImage     types.String `tfsdk:"probe_image"`
	AllowedTarget  types.String `tfsdk:"allowed_target"`
	DeniedTarget   types.String `tfsdk:"denied_target"`
	OutsideAddress types.String `tfsdk:"outside_address"`
	DNSName        types.String `tfsdk:"dns_name"`
	HostPort       types.Int64  `tfsdk:"host_port"`
	TimeoutSeconds types.Int64  `tfsdk:"timeout_seconds"`
}

func (in threegateVerifyInputs) options() topospec.VerifyOptions {
	return topospec.VerifyOptions{
		Image: in.ProbeImage.ValueString(), AllowedTarget: in.AllowedTarget.ValueString(), DeniedTarget: in.DeniedTarget.ValueString(),
		OutsideAddress: in.OutsideAddress.ValueString(), DNSName: in.DNSName.ValueString(), HostPort: int(in.HostPort.ValueInt64()),
		Timeout: time.Duration(in.TimeoutSeconds.ValueInt64()) * time.Second,
	}
}

// verifyInput describes one input attribute once, for both schemas.
type verifyInput struct {
	required bool
	isInt    bool
	desc     string
	str      []validator.String
	int      []validator.Int64
}

func verifyInputs() map[string]verifyInput {
	return map[string]verifyInput{
		"name":        {required: true, desc: "Name of the `threegate_network` topology."},
		"probe_image": {desc: "Image to run the probes in; it must contain `/usr/local/bin/agent-runner`. Defaults to the proxy's image."},
		"allowed_target": {str: []validator.String{hostPort()},
			desc: "A `host:port` the allowlist admits: FETCH must get a tunnel to it through the proxy. " +
				"When the host is an IP address, CORE and FETCH also dial it directly and must fail (the firewall opens its port " +
				"for the proxy's egress only)."},
		"denied_target": {str: []validator.String{hostPort()},
			desc: "A `host:port` the allowlist does not admit: the proxy must answer 403."},
		"outside_address": {str: []validator.String{ipPort()},
			desc: "An `ip:port` outside the topology, not in the allowlist: no member may reach it directly, and the proxy must refuse it."},
		"dns_name": {desc: "A name outside the topology that every role must fail to resolve (its `DNS outside name` row; each role also " +
			"resolves its probe's own name, which must work). Defaults to `" + topospec.DefaultVerifyDNSName + "`. The probes get their role's " +
			"DNS settings, so the query goes only to the topology's DNS sink on llmnet and never leaves the host, on every engine version. " +
			"When it is set and the topology's proxy has `dns` servers, CORE and FETCH also ask the first of them for this name directly, " +
			"over UDP and TCP port 53, which must fail: port 53 is open for the proxy only. On a cluster every probe pod has no " +
			"resolver (its resolv.conf names only its own loopback, as a member's does), resolves its own name from /etc/hosts, and " +
			"also asks the cluster's DNS Service (kube-system/kube-dns) directly over UDP and TCP port 53, which must fail."},
		"host_port": {isInt: true, int: []validator.Int64{int64validator.Between(1, 65535)},
			desc: "Port tried on each bridge gateway (the host), 1 to 65535; any answer, even a reset, counts as reachable. Defaults to " +
				strconv.Itoa(topospec.DefaultVerifyHostPort) + "."},
		"timeout_seconds": {isInt: true, int: []validator.Int64{int64validator.Between(1, topospec.MaxVerifyTimeoutSeconds)},
			desc: fmt.Sprintf("Seconds allowed per check, 1 to %d; a check that times out counts as blocked. Defaults to %d.",
				topospec.MaxVerifyTimeoutSeconds, topospec.DefaultVerifyTimeoutSeconds)},
	}
}

// verifyDataSourceAttributes are the inputs as data source attributes.
func verifyDataSourceAttributes() map[string]dsschema.Attribute {
	out := map[string]dsschema.Attribute{}
	for k, v := range verifyInputs() {
		if v.isInt {
			out[k] = dsschema.Int64Attribute{Required: v.required, Optional: !v.required, Validators: v.int, MarkdownDescription: v.desc}
		} else {
			out[k] = dsschema.StringAttribute{Required: v.required, Optional: !v.required, Validators: v.str, MarkdownDescription: v.desc}
		}
	}
	return out
}

// verifyActionAttributes are the inputs as action attributes.
func verifyActionAttributes() map[string]actionschema.Attribute {
	out := map[string]actionschema.Attribute{}
	for k, v := range verifyInputs() {
		if v.isInt {
			out[k] = actionschema.Int64Attribute{Required: v.required, Optional: !v.required, Validators: v.int, MarkdownDescription: v.desc}
		} else {
			out[k] = actionschema.StringAttribute{Required: v.required, Optional: !v.required, Validators: v.str, MarkdownDescription: v.desc}
		}
	}
	return out
}

// runThreegateVerify finds the topology on the provider's backend and runs
// its probes there (containers on a Docker host, pods on a cluster). It
// reports what stopped the probes from running in diags, naming what to
// do; a report that differs from the spec is the caller's to judge. user
// names the data source or the action in the not-found hint.
func runThreegateVerify(ctx context.Context, data *providerData, in threegateVerifyInputs, user string, diags *diag.Diagnostics) (topospec.Report, bool) {
	name := in.Name.ValueString()
	b := topologyBackend(ctx, data)
	spec, err := b.Import(ctx, name)
	var nf *topospec.NotFoundError
	switch {
	case errors.As(err, &nf):
		diags.AddAttributeError(path.Root("name"), "ThreeGate Topology Not Found",
			fmt.Sprintf("Reading topology %q from %s: %v\n\nName a threegate_network that exists, and give this %s "+
				"depends_on = [threegate_network.<name>] so that it runs after the topology is made.", name, nf.Where, nf.Err, user))
		return topospec.Report{}, false
	case err != nil:
		addFailure(diags, err, "ThreeGate Topology Invalid", "reading topology "+name)
		return topospec.Report{}, false
	}
	rep, err := b.Verify(ctx, spec, in.options())
	if err != nil {
		addRuntimeError(diags, "ThreeGate Verification Failed", "running probe containers for "+name, err)
		return topospec.Report{}, false
	}
	return rep, true
}

// failingRows is the report cut to its failing probes and violations.
func failingRows(rep topospec.Report) topospec.Report {
	out := topospec.Report{Violations: rep.Violations}
	for _, p := range rep.Probes {
		if !p.Pass {
			out.Probes = append(out.Probes, p)
		}
	}
	return out
}
