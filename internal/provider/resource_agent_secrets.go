package provider

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

// secretBindingModel is one entry of meepa_agent's secret_bindings: where
// the egress proxy may send the secret of the entry's name.
type secretBindingModel struct {
	Hosts     types.List   `tfsdk:"hosts"`
	Header    types.String `tfsdk:"header"`
	Scheme    types.String `tfsdk:"scheme"`
	BasicUser types.String `tfsdk:"basic_user"`
}

var secretBindingAttrTypes = map[string]attr.Type{
	"hosts": types.ListType{ElemType: types.StringType}, "header": types.StringType,
	"scheme": types.StringType, "basic_user": types.StringType,
}

var secretBindingType = types.ObjectType{AttrTypes: secretBindingAttrTypes}

// secretBindingsSchema is secret_bindings: not sensitive, so that a plan
// shows which hosts each secret may be sent to. Every verdict on it is the
// runtime's (agentspec.CheckSecretBindings at plan and at the runner's
// start, agentspec.CheckBoundHosts at plan and at apply).
func secretBindingsSchema() schema.Attribute {
	return schema.MapNestedAttribute{
		Optional: true,
		MarkdownDescription: "Brokered secrets, keyed by the name of a secret in `secrets`: the hosts each may be sent to and how. " +
			"Two kinds of agent have a broker: a `fetch` agent of a topology (`threegate.role = \"fetch\"`), whose topology's egress " +
			"proxy brokers, and a host-mode agent (`container_mode.enabled = false`) with `file_access.allow_network`, whose runner runs " +
			"a broker of its own on loopback; any other agent's bindings fail the plan. The tools never see the value: the variable of " +
			"the secret's name holds a placeholder, valid for one message of this agent, and the broker, which terminates the tools' " +
			"TLS with a CA of the agent's own, replaces it by the value in the bound header of HTTPS requests to a bound host, and " +
			"nowhere else. A secret that no binding names " +
			"reaches no sandbox at all. Not sensitive: the plan shows where each secret may go. See the isolation-models guide, " +
			"\"Brokered secrets\".",
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"hosts": schema.ListAttribute{
				Required: true, ElementType: types.StringType,
				MarkdownDescription: "The hosts the secret may be sent to, at least one: allow patterns in the proxy's grammar (see " +
					"`threegate_network.proxy.allow`), e.g. `api.example.com` (port 443) or `*.example.com:8443`. Each must be inside the " +
					"fetch agent's `egress.allow` when it has one, else inside the topology's `proxy.allow`: a host the agent cannot reach " +
					"fails the plan.",
			},
			"header": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The request header the proxy writes the secret into, the only one it ever puts it in. Unset: `" +
					agentspec.DefaultSecretHeader + "`. Headers of the proxy or of HTTP framing (`Host`, `Proxy-Authorization`, " +
					"`Content-Length`, …) are refused.",
				Validators: []validator.String{scoped(notEmpty())},
			},
			"scheme": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The authentication scheme the fetch tool writes before the placeholder, e.g. `Bearer` or `token` " +
					"(then the header reads `Bearer <secret>` on its way out). Unset: the header's value is the secret alone.",
				Validators: []validator.String{scoped(notEmpty())},
			},
			"basic_user": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Send the secret as the password of HTTP basic authentication for this user name, in `" +
					agentspec.DefaultSecretHeader + "` (so `header`, if set, must be that, and `scheme` unset).",
				Validators: []validator.String{scoped(notEmpty())},
			},
		}},
	}
}

// secretBindingsOf reads secret_bindings into the runtime's bindings. A
// map that is not wholly known marks "secret_bindings" unknown and
// yields nil: its bindings are judged together, once known.
func secretBindingsOf(ctx context.Context, m types.Map, unknown map[string]bool, diags *diag.Diagnostics) map[string]agentspec.SecretBinding {
	if m.IsNull() {
		return nil
	}
	if m.IsUnknown() {
		unknown["secret_bindings"] = true
		return nil
	}
	out := make(map[string]agentspec.SecretBinding, len(m.Elements()))
	for k, v := range m.Elements() {
		o, ok := v.(types.Object)
		if !ok || o.IsUnknown() {
			unknown["secret_bindings"] = true
			return nil
		}
		var b secretBindingModel
		diags.Append(o.As(ctx, &b, objectAsOpts)...)
		if b.Hosts.IsUnknown() || containsUnknown(b.Hosts) || b.Header.IsUnknown() || b.Scheme.IsUnknown() || b.BasicUser.IsUnknown() {
			unknown["secret_bindings"] = true
			return nil
		}
		out[k] = agentspec.SecretBinding{
			Hosts:  stringList(ctx, b.Hosts, diags),
			Header: b.Header.ValueString(), Scheme: b.Scheme.ValueString(), BasicUser: b.BasicUser.ValueString(),
		}
	}
	return out
}

// secretBindingsValue is secret_bindings of bindings read back (import):
// an empty setting is null, as a configuration that leaves it out.
func secretBindingsValue(bindings map[string]agentspec.SecretBinding) types.Map {
	if len(bindings) == 0 {
		return types.MapNull(secretBindingType)
	}
	orNull := func(s string) types.String {
		if s == "" {
			return types.StringNull()
		}
		return types.StringValue(s)
	}
	vals := make(map[string]attr.Value, len(bindings))
	for k, b := range bindings {
		vals[k] = types.ObjectValueMust(secretBindingAttrTypes, map[string]attr.Value{
			"hosts": listOf(b.Hosts), "header": orNull(b.Header), "scheme": orNull(b.Scheme), "basic_user": orNull(b.BasicUser),
		})
	}
	return types.MapValueMust(secretBindingType, vals)
}

// bindingWidening lists what moving from bindings o to n lets a secret
// reach that it could not: a host it is newly bound to, or a binding
// that now sends it another way.
func bindingWidening(o, n map[string]agentspec.SecretBinding) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(n)) {
		b, old := n[k], o[k]
		var ceiling proxy.Allowlist
		if bindingHow(old) == bindingHow(b) {
			ceiling = patterns(old.Hosts)
		}
		for _, h := range canonicalHosts(b.Hosts) {
			if p, err := proxy.ParsePattern(h); err == nil && !ceiling.Covers(p) {
				out = append(out, fmt.Sprintf("secret %s may be sent to %s (%s)", k, h, bindingHow(b)))
			}
		}
	}
	return out
}

// bindingHow is where and how a binding puts its secret: "Authorization",
// "Authorization: Bearer", "Authorization: basic auth for user bot".
func bindingHow(b agentspec.SecretBinding) string {
	switch h := b.HeaderOrDefault(); {
	case b.BasicUser != "":
		return fmt.Sprintf("%s: basic auth for user %s", h, b.BasicUser)
	case b.Scheme != "":
		return h + ": " + b.Scheme
	default:
		return h
	}
}

// canonicalHosts are the hosts in the proxy's canonical form (the port
// written out); one that does not parse is kept as written.
func canonicalHosts(hosts []string) []string {
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = h
		if p, err := proxy.ParsePattern(h); err == nil {
			out[i] = p.String()
		}
	}
	return out
}

// patterns are the hosts that parse.
func patterns(hosts []string) proxy.Allowlist {
	var l proxy.Allowlist
	for _, h := range hosts {
		if p, err := proxy.ParsePattern(h); err == nil {
			l = append(l, p)
		}
	}
	return l
}

// warnBindingsWiden says what a change of secret_bindings lets a secret
// reach that it could not before: a security change, as a wider egress.
func warnBindingsWiden(ctx context.Context, plan, state agentModel, diags *diag.Diagnostics) {
	var d diag.Diagnostics
	unknown := map[string]bool{}
	old := secretBindingsOf(ctx, state.SecretBindings, unknown, &d)
	cur := secretBindingsOf(ctx, plan.SecretBindings, unknown, &d)
	if d.HasError() || unknown["secret_bindings"] {
		return
	}
	if opens := bindingWidening(old, cur); len(opens) > 0 {
		diags.AddAttributeWarning(path.Root("secret_bindings"), "Secret Bindings Widen",
			fmt.Sprintf("This change lets agent %q's secrets go where they could not:\n- %s\n\nReview it before applying.",
				plan.AgentID.ValueString(), strings.Join(opens, "\n- ")))
	}
}
