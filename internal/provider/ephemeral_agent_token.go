package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

var (
	_ ephemeral.EphemeralResourceWithConfigure      = (*agentTokenEphemeral)(nil)
	_ ephemeral.EphemeralResourceWithValidateConfig = (*agentTokenEphemeral)(nil)
)

// NewAgentTokenEphemeral is the meepa_agent_token ephemeral resource: a
// short-lived API token for one agent, never in plan or state.
func NewAgentTokenEphemeral() ephemeral.EphemeralResource { return &agentTokenEphemeral{} }

type agentTokenEphemeral struct {
	data *providerData
}

type agentTokenModel struct {
	AgentID    types.String `tfsdk:"agent_id"`
	TTLSeconds types.Int64  `tfsdk:"ttl_seconds"`
	Token      types.String `tfsdk:"token"`
	ExpiresAt  types.String `tfsdk:"expires_at"`
}

func (e *agentTokenEphemeral) Metadata(_ context.Context, req ephemeral.MetadataRequest, resp *ephemeral.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_agent_token"
}

func (e *agentTokenEphemeral) Schema(_ context.Context, _ ephemeral.SchemaRequest, resp *ephemeral.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A short-lived bearer token for one agent's API, made from the runner's own token (read from what the " +
			"backend holds: nothing secret goes in the configuration) and never written to plan or state. The runner accepts it " +
			"until `expires_at`, for that agent only; a new `token_version` on the agent ends every short-lived token made before. " +
			"Use it where a module hands the agent's API to something else (a write-only attribute, a provider's configuration) " +
			"instead of `meepa_agent.<name>.token`.",
		Attributes: map[string]schema.Attribute{
			"agent_id": schema.StringAttribute{Required: true, MarkdownDescription: "The agent's id (`meepa_agent.<name>.agent_id`)."},
			"ttl_seconds": schema.Int64Attribute{Optional: true, MarkdownDescription: fmt.Sprintf("How long the token is good for: "+
				"1 to %d seconds; default %d.", int(agentspec.MaxShortTokenTTL/time.Second), int(agentspec.DefaultShortTokenTTL/time.Second))},
			"token": schema.StringAttribute{Computed: true, Sensitive: true,
				MarkdownDescription: "`Authorization: Bearer <token>` for the agent's API."},
			"expires_at": schema.StringAttribute{Computed: true, MarkdownDescription: "When the runner stops accepting it (RFC 3339, UTC)."},
		},
	}
}

func (e *agentTokenEphemeral) Configure(_ context.Context, req ephemeral.ConfigureRequest, resp *ephemeral.ConfigureResponse) {
	e.data = configureData(req.ProviderData, &resp.Diagnostics)
}

func (e *agentTokenEphemeral) ValidateConfig(ctx context.Context, req ephemeral.ValidateConfigRequest, resp *ephemeral.ValidateConfigResponse) {
	var m agentTokenModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	checkAgentID(m.AgentID, &resp.Diagnostics)
	if t := m.TTLSeconds; !t.IsUnknown() && !t.IsNull() && (t.ValueInt64() < 1 || time.Duration(t.ValueInt64())*time.Second > agentspec.MaxShortTokenTTL) {
		resp.Diagnostics.AddAttributeError(path.Root("ttl_seconds"), "Invalid Token Lifetime",
			fmt.Sprintf("%d is not between 1 and %d seconds.", t.ValueInt64(), int(agentspec.MaxShortTokenTTL/time.Second)))
	}
}

func (e *agentTokenEphemeral) Open(ctx context.Context, req ephemeral.OpenRequest, resp *ephemeral.OpenResponse) {
	var m agentTokenModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !requireProviderData(e.data, "meepa_agent_token", &resp.Diagnostics) {
		return
	}
	ttl := agentspec.DefaultShortTokenTTL
	if !m.TTLSeconds.IsNull() {
		ttl = time.Duration(m.TTLSeconds.ValueInt64()) * time.Second
	}
	svc, err := e.data.agents(ctx)
	var tok string
	var exp time.Time
	if err == nil {
		tok, exp, err = svc.ShortToken(ctx, m.AgentID.ValueString(), ttl)
	}
	if err != nil {
		(&agentResource{data: e.data}).addServiceError(&resp.Diagnostics, err)
		return
	}
	m.Token, m.ExpiresAt = types.StringValue(tok), types.StringValue(exp.UTC().Format(time.RFC3339))
	resp.Diagnostics.Append(resp.Result.Set(ctx, &m)...)
}
