package provider

import (
	"context"
	"reflect"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

func TestAgentSchemaImplementation(t *testing.T) {
	ctx := context.Background()
	var resp resource.SchemaResponse
	NewAgentResource().Schema(ctx, resource.SchemaRequest{}, &resp)
	if resp.Diagnostics.HasError() {
		t.Fatal(resp.Diagnostics)
	}
	if diags := resp.Schema.ValidateImplementation(ctx); diags.HasError() {
		t.Fatal(diags)
	}
	// Every attribute, nested ones included, is documented.
	n := 0
	var walk func(prefix string, attrs map[string]schema.Attribute)
	walk = func(prefix string, attrs map[string]schema.Attribute) {
		for name, a := range attrs {
			n++
			if a.GetMarkdownDescription() == "" {
				t.Errorf("%s%s has no MarkdownDescription", prefix, name)
			}
			if nested, ok := a.(schema.SingleNestedAttribute); ok {
				walk(prefix+name+".", nested.Attributes)
			}
		}
	}
	walk("", resp.Schema.Attributes)
	if n < 40 {
		t.Errorf("only %d attributes walked", n)
	}
	if !resp.Schema.Attributes["llm"].(interface{ IsRequired() bool }).IsRequired() {
		t.Error("llm must be required")
	}
}

// TestRuntimeRoundTrip: a runner config read back for import and converted
// again gives the same config (the API key aside, which is write-only), so
// import and the hash of the file on disk agree with what apply wrote.
func TestRuntimeRoundTrip(t *testing.T) {
	ctx := context.Background()
	in := agentspec.Config{
		AgentID: "a1", Workspace: "/s/agents/a1", Listen: "unix:///s/runners/a1/run/runner.sock", Token: "tok",
		Container: agentspec.ContainerMode{Enabled: true, Image: "img:1", MemoryLimit: agentspec.SizeOf(1 << 30), TimeoutSeconds: 60, Network: "none",
			PidsLimit: 128, User: userSpec(t, "1000:1000"), Runtime: "runc", Prestart: false},
		FileAccess: landlock.FileAccess{AllowRead: []string{"/srv/a"}, AllowReadWrite: []string{"/srv/b"}, Deny: []string{"/srv/b/c"},
			AllowHomeDotfiles: true, AllowNetwork: false},
		LLM:                  agentspec.LLMConfig{Provider: "openai", Model: "m", BaseURL: "http://x/v1", APIKey: "sk"},
		Secrets:              map[string]string{"A": "1"},
		InjectCredentialsEnv: true, InjectSecretsEnv: false, RedactSecrets: true, MaxSteps: 5,
		LLMLimits: agentspec.LLMLimits{MaxTokensPerCall: 1000, MessageTokenBudget: 20000, AgentTokenBudget: 300000, AgentBudgetWindowSeconds: 3600},
	}
	meta := agentspec.Meta{Soul: "s", Memory: "m", ManageSoul: true, Deployment: "container", RunnerImage: "runner:1"}
	var m agentModel
	modelOf(&m, agentspec.Agent{Config: in, Meta: meta})
	if !m.LLM.Attributes()["api_key"].IsNull() || !m.Secrets.IsNull() {
		t.Fatal("a write-only value (the API key, the secrets) was read back into the model")
	}
	// As apply does: the write-only secrets come from the configuration.
	m.Secrets = types.MapValueMust(types.StringType, map[string]attr.Value{"A": types.StringValue("1")})
	var diags diag.Diagnostics
	got := agentOf(ctx, m, "sk", &diags)
	a, known := got.Agent, got.known()
	if !known || diags.HasError() {
		t.Fatalf("agentOf: known=%v %v", known, diags)
	}
	// The service fills the workspace; the rest comes back as it went.
	a.Config.Workspace = in.Workspace
	if !reflect.DeepEqual(a.Config, in) {
		t.Errorf("round trip:\n got %+v\nwant %+v", a.Config, in)
	}
	if a.RunnerImage() != "runner:1" || !reflect.DeepEqual(a.Meta, meta) {
		t.Errorf("settings: %+v", a.Meta)
	}
	// Without runner.image the runner runs container_mode.image.
	meta.RunnerImage = ""
	modelOf(&m, agentspec.Agent{Config: in, Meta: meta})
	if a := agentOf(ctx, m, "", &diags).Agent; a.RunnerImage() != "img:1" {
		t.Errorf("runner image %q", a.RunnerImage())
	}
}

// userSpec is s parsed as container_mode.user.
func userSpec(t *testing.T, s string) agentspec.UserSpec {
	t.Helper()
	u, err := agentspec.ParseUserSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
