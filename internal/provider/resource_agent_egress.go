package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

// egressModel is meepa_agent's egress block: a FETCH agent's own policy
// inside its topology's allow list.
type egressModel struct {
	Allow      types.List `tfsdk:"allow"`
	Deny       types.List `tfsdk:"deny"`
	AllowCIDRs types.List `tfsdk:"allow_cidrs"`
}

var egressAttrTypes = map[string]attr.Type{
	"allow": types.ListType{ElemType: types.StringType}, "deny": types.ListType{ElemType: types.StringType},
	"allow_cidrs": types.ListType{ElemType: types.StringType},
}

func egressSchema() schema.Attribute {
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "For a `fetch` agent of a topology: its own egress policy, which can only narrow the topology's " +
			"`proxy.allow` (the ceiling; the plan refuses an entry outside it). The proxy enforces it per message: each message's " +
			"requests carry a credential the runner mints for that message, naming the agent, and the proxy refuses requests " +
			"without a live one (407). A sibling agent in the same topology keeps its own policy.",
		Attributes: map[string]schema.Attribute{
			"allow": schema.ListAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Allow patterns (the proxy's grammar, see `threegate_network.proxy.allow`), each covered by an " +
					"entry of the topology's list: a name it lists, a name under one of its wildcards, a narrower wildcard, or an IP " +
					"it lists, on the same port. Set, they replace the topology's list for this agent; unset, the agent has the whole list.",
			},
			"deny": schema.ListAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Patterns this agent may not reach even where an allow entry matches.",
			},
			"allow_cidrs": schema.ListAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Public address ranges (or ranges of the topology's `allow_private`): set, the proxy dials this " +
					"agent's requests only at addresses inside them (a name at its addresses inside them, an IP literal only when " +
					"inside), on top of the allow entries.",
			},
		},
	}
}

// egressOf reads the egress block into a policy; bad entries are errors
// on their element.
func egressOf(ctx context.Context, o types.Object, unknown map[string]bool, diags *diag.Diagnostics) *agentspec.Egress {
	if o.IsNull() {
		return nil
	}
	if o.IsUnknown() {
		unknown["egress"] = true
		return nil
	}
	var m egressModel
	diags.Append(o.As(ctx, &m, objectAsOpts)...)
	lists := [3][]string{}
	for i, l := range []types.List{m.Allow, m.Deny, m.AllowCIDRs} {
		if l.IsUnknown() {
			unknown["egress"] = true
			return nil
		}
		var vs []types.String
		diags.Append(l.ElementsAs(ctx, &vs, false)...)
		for _, v := range vs {
			if v.IsUnknown() {
				unknown["egress"] = true
				return nil
			}
			lists[i] = append(lists[i], v.ValueString())
		}
	}
	p, errs := proxy.ParsePolicy(lists[0], lists[1], lists[2])
	addErrors(diags, errs.Err(), "", "", nil)
	return &agentspec.Egress{Policy: p}
}

// planEgress checks a FETCH agent's policy and its secrets' bound hosts
// against its topology's allow list at plan, with the functions apply
// runs (proxy.Narrows, agentspec.CheckBoundHosts): the topology as
// planned in this run, else as it runs; a topology that is neither is
// checked at apply.
func planEgress(ctx context.Context, r *agentResource, in agentInput, diags *diag.Diagnostics) {
	e, bindings := in.Config.Egress, in.Config.SecretBindings
	if e == nil && len(bindings) == 0 || in.unknown["egress"] || in.unknown["secret_bindings"] || in.unknown["threegate.network"] || in.unknown["threegate.role"] {
		return
	}
	if in.Meta.ThreegateRole != agentspec.RoleFetch {
		if e != nil {
			diags.AddAttributeError(path.Root("egress"), "Egress Policy Without Role Fetch",
				"egress: only a fetch agent reaches the proxy, so only it has an egress policy; this agent's threegate.role is "+
					orNoTopology(in.Meta.ThreegateRole)+".")
		}
		return // secret_bindings without the role: validateSettings says so
	}
	spec, ok := r.data.run.planned(in.Meta.ThreegateNetwork)
	if !ok {
		var err error
		if spec, err = r.data.topologies(ctx).Import(ctx, in.Meta.ThreegateNetwork); err != nil {
			return // not there yet: apply checks against the live one
		}
	}
	var policy proxy.Policy
	if e != nil {
		policy = e.Policy
		addErrors(diags, proxy.Narrows(spec.Proxy.Allow, spec.Docker.AllowPrivate, policy).Err(), "", "", nil)
	}
	addErrors(diags, agentspec.CheckBoundHosts(bindings, spec.Proxy.Allow, policy).Err(), "", "", nil)
}

// warnEgressWidens says, in the words of the topology's own warning,
// what a change of an agent's policy opens to that agent.
func warnEgressWidens(ctx context.Context, plan, state agentModel, diags *diag.Diagnostics) {
	var d diag.Diagnostics
	old := egressOf(ctx, state.Egress, map[string]bool{}, &d)
	unknown := map[string]bool{}
	cur := egressOf(ctx, plan.Egress, unknown, &d)
	if d.HasError() || unknown["egress"] || state.Threegate.IsNull() {
		return
	}
	var o, n proxy.Policy
	if old != nil {
		o = old.Policy
	}
	if cur != nil {
		n = cur.Policy
	}
	if opens := policyWidening(o, n); len(opens) > 0 {
		diags.AddAttributeWarning(path.Root("egress"), "ThreeGate Connectivity Widens",
			fmt.Sprintf("This change to agent %q's egress is a security change; it opens:\n- %s\n\nReview it before applying.",
				plan.AgentID.ValueString(), strings.Join(opens, "\n- ")))
	}
}

// policyWidening lists what moving an agent from policy o to n opens.
func policyWidening(o, n proxy.Policy) []string {
	var out []string
	has := func(l proxy.Allowlist, p proxy.Pattern) bool { return slices.Contains(l, p) }
	// Only new reach counts: an entry inside an old one narrows.
	switch {
	case len(o.Allow) > 0 && len(n.Allow) == 0:
		out = append(out, "the agent gets the topology's whole allow list instead of its own")
	case len(o.Allow) > 0:
		for _, p := range n.Allow {
			if !o.Allow.Covers(p) {
				out = append(out, fmt.Sprintf("the agent may reach %s", p))
			}
		}
	}
	for _, p := range o.Deny {
		if !has(n.Deny, p) {
			out = append(out, fmt.Sprintf("%s is no longer denied to the agent", p))
		}
	}
	switch {
	case len(o.CIDRs) > 0 && len(n.CIDRs) == 0:
		out = append(out, "the agent's connections are no longer confined to its allow_cidrs")
	case len(o.CIDRs) > 0:
		for _, c := range n.CIDRs {
			if !proxy.PrefixInside(o.CIDRs, c) {
				out = append(out, fmt.Sprintf("the agent may reach addresses in %s", c))
			}
		}
	}
	return out
}

// egressValue is the egress block of a policy read back (import); null
// when the agent has none.
func egressValue(e *agentspec.Egress) types.Object {
	if e == nil || e.Policy.IsZero() {
		return types.ObjectNull(egressAttrTypes)
	}
	cidrs := make([]string, len(e.Policy.CIDRs))
	for i, c := range e.Policy.CIDRs {
		cidrs[i] = c.String()
	}
	l := func(s []string) types.List { return listOrNull(context.Background(), s) }
	return types.ObjectValueMust(egressAttrTypes, map[string]attr.Value{
		"allow": l(e.Policy.Allow.Strings()), "deny": l(e.Policy.Deny.Strings()), "allow_cidrs": l(cidrs),
	})
}
