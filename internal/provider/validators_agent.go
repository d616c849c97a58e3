package provider

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
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
	"inject_secrets_env":              "Secrets Stay Out Of Sandboxes",
	"egress_upstream_ca":              "Invalid Upstream CA",
}

// validateSettings runs the runner's own start-time check of the settings
// on the config this plan would write (agentOf's), so the plan refuses
// exactly what the runner would. Unknown values are left out (their zero
// is the default, which passes) and checked again once known, and so is a
// verdict that reads one of them (judgedWith).
func validateSettings(in agentInput, diags *diag.Diagnostics) {
	var judged []error
	// The role is the topology's, set on the config at deploy; bindings
	// are judged with it.
	c := in.Config
	c.Role = in.Meta.ThreegateRole
	if c.Secrets == nil && !in.unknown["secrets"] {
		c.Secrets = map[string]string{} // none, which is known: a binding names a secret there is not
	}
	for _, e := range unjoin(agentspec.ValidateSettings(&c)) {
		var fe *fault.FieldError
		if errors.As(e, &fe) && in.unjudged(fe.Field) {
			continue
		}
		judged = append(judged, e)
	}
	addErrors(diags, errors.Join(judged...), "Invalid Agent Settings", "", describeSetting)
}

// judgedWith are the settings a verdict on a field reads besides the
// field: each token budget is judged against the ones it holds, and host
// mode's memory floor applies only once the mode is known.
var judgedWith = map[string][]string{
	"llm.message_token_budget":    {"llm.max_tokens_per_call", "llm.message_token_budget", "llm.agent_token_budget"},
	"llm.agent_token_budget":      {"llm.max_tokens_per_call", "llm.message_token_budget", "llm.agent_token_budget"},
	"container_mode.memory_limit": {"container_mode.enabled"},
	"secret_bindings":             bindingInputs,
	"egress_upstream_ca":          append([]string{"secret_bindings"}, bindingInputs...),
}

// bindingInputs are what says which broker an agent's bound secrets
// have (agentspec.BrokerOf), and which secrets there are.
var bindingInputs = []string{"threegate", "threegate.role", "secrets", "container_mode", "container_mode.enabled",
	"file_access", "file_access.allow_network", "file_access.unrestricted"}

// unjudged says whether a verdict on field must wait: its block, the field
// or a setting it is judged with is not known yet.
func (in agentInput) unjudged(field string) bool {
	if in.unknown[strings.SplitN(field, ".", 2)[0]] || in.unknown[field] {
		return true
	}
	for _, other := range judgedWith[field] {
		if in.unknown[other] {
			return true
		}
	}
	return false
}

// describeSetting words a runner verdict for the attribute at fault.
func describeSetting(fe *fault.FieldError) (summary, detail string) {
	summary, detail = settingSummaries[fe.Field], fe.Error()+"."
	switch {
	case fe.Key != "":
		if fe.Summary != "" {
			summary = fe.Summary
		}
		if fe.Field == "secret_bindings" && agentspec.CheckToolEnvName(fe.Key) != nil {
			detail += fmt.Sprintf(" Rename the secret (e.g. %q) in secrets and in secret_bindings.", envNameSuggestion(fe.Key))
		}
	case fe.Index >= 0:
		summary = "Invalid File Access Path"
	case fe.Field == "file_access.deny":
		summary = "Deny With Unrestricted"
	case summary == "":
		summary = "Invalid File Access"
	}
	return summary, detail
}

// containerValues parses container_mode's typed settings, memory_limit and
// user, from their attribute strings: the plan's one parse of them (the
// runner's is the config's Unmarshal). A bad one is an error on its
// attribute; null or unknown is unset, the default.
func containerValues(cm containerModeModel, diags *diag.Diagnostics) (agentspec.Size, agentspec.UserSpec) {
	mem, err := agentspec.ParseSize(cm.MemoryLimit.ValueString())
	if err != nil {
		addErrors(diags, &fault.FieldError{Field: "container_mode.memory_limit", Index: -1, Err: err}, "Invalid Agent", "", describeSetting)
	}
	user, err := agentspec.ParseUserSpec(cm.User.ValueString())
	if err != nil {
		addErrors(diags, &fault.FieldError{Field: "container_mode.user", Index: -1, Err: err}, "Invalid Agent", "", describeSetting)
	}
	return mem, user
}
