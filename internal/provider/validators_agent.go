package provider

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
)

// listenAddress validates runner.listen with the parser apply uses.
func listenAddress() validator.String {
	return stringCheck{
		summary: "Invalid Listen Address",
		desc:    "`unix:///<absolute path>` or `127.0.0.1:<port>`",
		check: func(s string) error {
			_, err := deploy.ParseListen(s)
			return err
		},
	}
}

// envNameSuggestion turns a name into one agentspec.EnvNamePattern accepts.
func envNameSuggestion(k string) string {
	b := []byte(strings.ToUpper(k))
	for i, c := range b {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	if len(b) == 0 || b[0] >= '0' && b[0] <= '9' {
		b = append([]byte{'_'}, b...)
	}
	if agentspec.CheckToolEnvName(string(b)) != nil {
		// A name the sandbox reserves (HOME, PATH, …).
		return "SECRET_" + string(b)
	}
	return string(b)
}

// scoped wraps a string validator so that each error's detail starts with
// the attribute's path. Terraform's text output shows only the resource for
// an error inside a nested attribute; the path in the detail tells the user
// (and tests) which value is at fault.
func scoped(v validator.String) validator.String { return scopedValidator{v} }

type scopedValidator struct{ inner validator.String }

func (s scopedValidator) Description(ctx context.Context) string { return s.inner.Description(ctx) }
func (s scopedValidator) MarkdownDescription(ctx context.Context) string {
	return s.inner.MarkdownDescription(ctx)
}
func (s scopedValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	var inner validator.StringResponse
	s.inner.ValidateString(ctx, req, &inner)
	for _, d := range inner.Diagnostics {
		detail := d.Detail()
		if !strings.Contains(detail, req.Path.String()) {
			detail = req.Path.String() + ": " + detail
		}
		if d.Severity() == diag.SeverityError {
			resp.Diagnostics.AddAttributeError(req.Path, d.Summary(), detail)
		} else {
			resp.Diagnostics.AddAttributeWarning(req.Path, d.Summary(), detail)
		}
	}
}

// baseURL checks llm.base_url: the LLM clients join their paths onto it, so
// it must be an absolute http(s) URL.
func baseURL() validator.String {
	return stringCheck{
		summary: "Invalid Base URL",
		desc:    "an absolute `http://` or `https://` URL",
		check: func(s string) error {
			if s == "" {
				return nil
			}
			u, err := url.Parse(s)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("%q is not an absolute http(s) URL; write e.g. \"https://api.openai.com/v1\" or \"http://llm-gateway:4000/v1\"", s)
			}
			return nil
		},
	}
}

// notEmpty refuses an explicit empty string where the runner's config reads
// empty as "the default": in Terraform the default is written out, so an
// empty value is a mistake. Every other verdict on these attributes is the
// runner's own (ValidateConfig runs agentspec.ValidateSettings).
func notEmpty() validator.String {
	return stringCheck{
		summary: "Empty Value",
		desc:    "must not be empty (omit it for the default)",
		check: func(s string) error {
			if s == "" {
				return fmt.Errorf("must not be empty; omit it for the default")
			}
			return nil
		},
	}
}

// notZero refuses an explicit 0 where the runner's config reads 0 as "the
// default"; agentspec.ValidateSettings judges every other value, with the same
// bounds.
func notZero(lo, hi int64) validator.Int64 { return notZeroValidator{lo, hi} }

type notZeroValidator struct{ lo, hi int64 }

func (v notZeroValidator) Description(context.Context) string {
	return fmt.Sprintf("must be between %d and %d", v.lo, v.hi)
}

func (v notZeroValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v notZeroValidator) ValidateInt64(_ context.Context, req validator.Int64Request, resp *validator.Int64Response) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() || req.ConfigValue.ValueInt64() != 0 {
		return
	}
	resp.Diagnostics.AddAttributeError(req.Path, "Invalid Value",
		fmt.Sprintf("%s: must be between %d and %d, got 0; omit it for the default.", req.Path, v.lo, v.hi))
}

// settingSummaries are the diagnostics' summaries of the settings the
// runner checks (agentspec.ValidateSettings), by field.
var settingSummaries = map[string]string{
	"container_mode.memory_limit":     "Invalid Memory Limit",
	"container_mode.user":             "Invalid User",
	"container_mode.timeout_seconds":  "Invalid Timeout",
	"container_mode.pids_limit":       "Invalid Pids Limit",
	"container_mode.network":          "Invalid Container Network",
	"container_mode.runtime":          "Invalid Runtime",
	"max_steps":                       "Invalid Max Steps",
	"llm.max_tokens_per_call":         "Invalid Token Limit",
	"llm.message_token_budget":        "Invalid Token Budget",
	"llm.agent_token_budget":          "Invalid Token Budget",
	"llm.agent_budget_window_seconds": "Invalid Budget Window",
	"secrets":                         "Invalid Secret Name",
}

// validateSettings runs the runner's own start-time check of the settings
// on the config this plan would write, so the plan refuses exactly what the
// runner would. Unknown values are left out (their zero is the default,
// which passes) and checked again once known.
func validateSettings(ctx context.Context, m agentModel, diags *diag.Diagnostics) {
	c, skip := settingsOf(ctx, m, diags)
	if diags.HasError() {
		return
	}
	for _, e := range unjoin(agentspec.ValidateSettings(&c)) {
		var fe *agentspec.FieldError
		if !errors.As(e, &fe) {
			diags.AddError("Invalid Agent Settings", e.Error())
			continue
		}
		if skip[strings.SplitN(fe.Field, ".", 2)[0]] || skip[fe.Field] {
			continue
		}
		addSettingError(fe, diags)
	}
}

// addSettingError puts a runner verdict on the attribute at fault.
func addSettingError(fe *agentspec.FieldError, diags *diag.Diagnostics) {
	p := path.Empty()
	field := fe.Field
	if field == "max_steps" {
		field = "llm.max_steps"
	}
	for _, name := range strings.Split(field, ".") {
		p = p.AtName(name)
	}
	summary, detail := settingSummaries[fe.Field], fe.Error()+"."
	switch {
	case fe.Key != "":
		p = p.AtMapKey(fe.Key)
		detail = fmt.Sprintf("secrets[%q]: with inject_secrets_env the name becomes an environment variable of the agent's "+
			"tools, and %v. Rename it (e.g. %q), or set inject_secrets_env = false.", fe.Key, fe.Err, envNameSuggestion(fe.Key))
	case fe.Index >= 0:
		p = p.AtListIndex(fe.Index)
		summary = "Invalid File Access Path"
	case fe.Field == "file_access.deny":
		summary = "Deny With Unrestricted"
	case summary == "":
		summary = "Invalid File Access"
	}
	diags.AddAttributeError(p, summary, detail)
}

// containerValues parses container_mode's typed settings, memory_limit and
// user, from their attribute strings: the plan's one parse of them (the
// runner's is the config's Unmarshal), for the validation and for the
// mapping apply writes. A bad one is an error on its attribute; null or
// unknown is unset, the default.
func containerValues(cm containerModeModel, diags *diag.Diagnostics) (agentspec.Size, agentspec.UserSpec) {
	mem, err := agentspec.ParseSize(cm.MemoryLimit.ValueString())
	if err != nil {
		addSettingError(&agentspec.FieldError{Field: "container_mode.memory_limit", Index: -1, Err: err}, diags)
	}
	user, err := agentspec.ParseUserSpec(cm.User.ValueString())
	if err != nil {
		addSettingError(&agentspec.FieldError{Field: "container_mode.user", Index: -1, Err: err}, diags)
	}
	return mem, user
}

// settingsOf is the config the runner would be given, as far as the
// configuration is known, and the blocks or fields to leave unjudged: a null
// value is the schema's default; an unknown one its runtime zero, which
// passes, and an unknown that another verdict depends on skips that one.
func settingsOf(ctx context.Context, m agentModel, diags *diag.Diagnostics) (agentspec.Config, map[string]bool) {
	skip := map[string]bool{}
	var cm containerModeModel
	var fa fileAccessModel
	var llm llmModel
	decode := func(o types.Object, name string, target any) {
		if o.IsUnknown() {
			skip[name] = true
		} else if !o.IsNull() {
			diags.Append(o.As(ctx, target, objectAsOpts)...)
		}
	}
	decode(m.ContainerMode, "container_mode", &cm)
	decode(m.FileAccess, "file_access", &fa)
	decode(m.LLM, "llm", &llm)
	for _, l := range []types.List{fa.AllowRead, fa.AllowReadWrite, fa.Deny} {
		if l.IsUnknown() || containsUnknown(l) {
			skip["file_access"] = true
		}
	}
	for _, v := range []types.Int64{llm.MaxTokensPerCall, llm.MessageTokenBudget, llm.AgentTokenBudget} {
		if v.IsUnknown() {
			// Each budget is judged against the one it holds.
			skip["llm.message_token_budget"], skip["llm.agent_token_budget"] = true, true
		}
	}
	if cm.Enabled.IsUnknown() {
		// Host mode's memory floor applies only once the mode is known.
		skip["container_mode.memory_limit"] = true
	}
	mem, user := containerValues(cm, diags)
	c := agentspec.Config{
		Container: agentspec.ContainerMode{
			Enabled: cm.Enabled.ValueBool(), MemoryLimit: mem, User: user,
			TimeoutSeconds: int(cm.TimeoutSeconds.ValueInt64()), PidsLimit: cm.PidsLimit.ValueInt64(),
			Network: cm.Network.ValueString(), Runtime: cm.Runtime.ValueString(),
		},
		MaxSteps:         int(llm.MaxSteps.ValueInt64()),
		LLMLimits:        llm.limits(),
		InjectSecretsEnv: !m.InjectSecretsEnv.IsUnknown() && (m.InjectSecretsEnv.IsNull() && agentspec.DefaultInjectSecretsEnv || m.InjectSecretsEnv.ValueBool()),
	}
	if !skip["file_access"] {
		c.FileAccess = agentspec.FileAccess{
			Unrestricted: fa.Unrestricted.ValueBool(), AllowRead: stringList(ctx, fa.AllowRead, diags),
			AllowReadWrite: stringList(ctx, fa.AllowReadWrite, diags), Deny: stringList(ctx, fa.Deny, diags),
		}
	}
	if !m.Secrets.IsNull() && !m.Secrets.IsUnknown() {
		c.Secrets = map[string]string{}
		for k := range m.Secrets.Elements() {
			c.Secrets[k] = ""
		}
	}
	if !m.Threegate.IsNull() {
		// With threegate the role's networks replace container_mode.network
		// (a conflict is its own error).
		c.Container.Network = ""
	}
	return c, skip
}
