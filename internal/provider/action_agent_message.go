package provider

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/action/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

var (
	_ action.ActionWithConfigure      = (*agentMessageAction)(nil)
	_ action.ActionWithValidateConfig = (*agentMessageAction)(nil)
)

// NewAgentMessageAction is the meepa_agent_message action (Terraform
// 1.14+): one message to an agent, failing on an error reply, so an apply
// can smoke-test an agent it just changed.
func NewAgentMessageAction() action.Action { return &agentMessageAction{} }

type agentMessageAction struct {
	data *providerData
}

type agentMessageModel struct {
	AgentID        types.String `tfsdk:"agent_id"`
	Text           types.String `tfsdk:"text"`
	Expect         types.String `tfsdk:"expect"`
	TimeoutSeconds types.Int64  `tfsdk:"timeout_seconds"`
}

// defaultMessageTimeout bounds a message when timeout_seconds is not set:
// the runner's own default message timeout, and a little to answer in.
const defaultMessageTimeout = 330 * time.Second

func (a *agentMessageAction) Metadata(_ context.Context, req action.MetadataRequest, resp *action.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_agent_message"
}

func (a *agentMessageAction) Schema(_ context.Context, _ action.SchemaRequest, resp *action.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Sends one message to a running agent, as its owner would (with the runner's own token, read from what " +
			"the backend holds: nothing to put in the configuration), and fails when the reply is an error, or does not match `expect`. " +
			"Trigger it after `meepa_agent` changes (`lifecycle { action_trigger { ... } }`) for a smoke test, or run it with " +
			"`terraform apply -invoke=action.meepa_agent_message.<name>`. The reply's first line shows in the CLI's output.",
		Attributes: map[string]schema.Attribute{
			"agent_id": schema.StringAttribute{Required: true, MarkdownDescription: "The agent's id (`meepa_agent.<name>.agent_id`)."},
			"text":     schema.StringAttribute{Required: true, MarkdownDescription: "The message."},
			"expect": schema.StringAttribute{Optional: true, MarkdownDescription: "A regular expression (RE2) the reply must match; " +
				"checked at plan for its syntax."},
			"timeout_seconds": schema.Int64Attribute{Optional: true, MarkdownDescription: fmt.Sprintf("How long to wait for the reply "+
				"(1 to 3600; default %d).", int(defaultMessageTimeout/time.Second))},
		},
	}
}

func (a *agentMessageAction) Configure(_ context.Context, req action.ConfigureRequest, resp *action.ConfigureResponse) {
	a.data = configureData(req.ProviderData, &resp.Diagnostics)
}

func (a *agentMessageAction) ValidateConfig(ctx context.Context, req action.ValidateConfigRequest, resp *action.ValidateConfigResponse) {
	var m agentMessageModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	checkAgentID(m.AgentID, &resp.Diagnostics)
	if e := m.Expect; !e.IsUnknown() && !e.IsNull() {
		if _, err := regexp.Compile(e.ValueString()); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("expect"), "Invalid Regular Expression", err.Error())
		}
	}
	if t := m.TimeoutSeconds; !t.IsUnknown() && !t.IsNull() && (t.ValueInt64() < 1 || t.ValueInt64() > 3600) {
		resp.Diagnostics.AddAttributeError(path.Root("timeout_seconds"), "Invalid Timeout",
			fmt.Sprintf("%d is not between 1 and 3600 seconds.", t.ValueInt64()))
	}
}

func (a *agentMessageAction) Invoke(ctx context.Context, req action.InvokeRequest, resp *action.InvokeResponse) {
	var m agentMessageModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !requireProviderData(a.data, "meepa_agent_message", &resp.Diagnostics) {
		return
	}
	timeout := defaultMessageTimeout
	if !m.TimeoutSeconds.IsNull() {
		timeout = time.Duration(m.TimeoutSeconds.ValueInt64()) * time.Second
	}
	id := m.AgentID.ValueString()
	svc, err := a.data.agents(ctx)
	var r agentspec.MessageReply
	if err == nil {
		progress(resp, fmt.Sprintf("sending a message to agent %s (waiting up to %s)", id, timeout))
		r, err = svc.Send(ctx, id, m.Text.ValueString(), timeout)
	}
	if err != nil {
		(&agentResource{data: a.data}).addServiceError(&resp.Diagnostics, err)
		return
	}
	if r.Failed() {
		resp.Diagnostics.AddError("Agent Message Failed", fmt.Sprintf("agent %s answered message %s with %s (HTTP %d): %s",
			id, r.MessageID, r.ErrorKind, r.Status, r.Error))
		return
	}
	if e := m.Expect.ValueString(); e != "" && !regexp.MustCompile(e).MatchString(r.Reply) {
		resp.Diagnostics.AddAttributeError(path.Root("expect"), "Unexpected Reply",
			fmt.Sprintf("agent %s replied to message %s with %q, which does not match %q.", id, r.MessageID, firstLine(r.Reply), e))
		return
	}
	progress(resp, fmt.Sprintf("agent %s replied in %d ms (message %s): %s", id, r.DurationMS, r.MessageID, firstLine(r.Reply)))
}

// checkAgentID refuses an agent_id that names no agent, at plan.
func checkAgentID(id types.String, diags *diag.Diagnostics) {
	if !id.IsUnknown() && !id.IsNull() && !workspace.ValidID(id.ValueString()) {
		diags.AddAttributeError(path.Root("agent_id"), "Invalid Agent ID",
			fmt.Sprintf("%q is not an agent id (%s).", id.ValueString(), workspace.IDPattern))
	}
}

// progress shows message in the CLI's output while an action runs.
func progress(resp *action.InvokeResponse, message string) {
	if resp.SendProgress != nil {
		resp.SendProgress(action.InvokeProgressEvent{Message: message})
	}
}

// firstLine is the reply's first line, cut to a length a CLI line holds.
func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			s = s[:i]
			break
		}
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
