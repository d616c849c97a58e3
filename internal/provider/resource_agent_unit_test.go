package provider

import (
	"context"
	"reflect"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
)

func TestParseMemoryLimit(t *testing.T) {
	good := map[string]int64{"512m": 512 << 20, "1g": 1 << 30, "6m": 6 << 20, "7000000": 7000000, "2G": 2 << 30, "65536k": 64 << 20}
	for in, want := range good {
		got, err := ParseMemoryLimit(in)
		if err != nil || got != want {
			t.Errorf("ParseMemoryLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"512x", "0", "-1m", "", "1.5g", "5m", "m", "512 m", "512mb", "1e9"} {
		if _, err := ParseMemoryLimit(bad); err == nil {
			t.Errorf("ParseMemoryLimit(%q) accepted", bad)
		}
	}
}

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

func TestParseUser(t *testing.T) {
	if o := parseUser("1000:2000"); o.UID != 1000 || o.GID != 2000 {
		t.Error(o)
	}
	if o := parseUser("1000"); o.UID != 1000 || o.GID != 1000 {
		t.Error(o)
	}
	if o := parseUser(""); o.UID != 65534 {
		t.Error(o)
	}
}

// TestRuntimeRoundTrip: a runner config read back for import and converted
// again gives the same config (the API key aside, which is write-only), so
// import and the hash of the file on disk agree with what apply wrote.
func TestRuntimeRoundTrip(t *testing.T) {
	ctx := context.Background()
	in := runner.Config{
		AgentID: "a1", Workspace: "/s/agents/a1", Listen: "unix:///s/runners/a1/run/runner.sock", Token: "tok",
		Container: runner.ContainerMode{Enabled: true, Image: "img:1", MemoryLimit: "1g", TimeoutSeconds: 60, Network: "none",
			PidsLimit: 128, User: "1000:1000", Runtime: "runc", Prestart: false},
		FileAccess: runner.FileAccess{AllowRead: []string{"/srv/a"}, AllowReadWrite: []string{"/srv/b"}, Deny: []string{"/srv/b/c"},
			AllowHomeDotfiles: true, AllowNetwork: false, HomeDir: hostHome()},
		LLM:                  agent.LLMConfig{Provider: "openai", Model: "m", BaseURL: "http://x/v1", APIKey: "sk"},
		Secrets:              map[string]string{"A": "1"},
		InjectCredentialsEnv: true, InjectSecretsEnv: false, RedactSecrets: true, MaxSteps: 5,
	}
	meta := agentMeta{Soul: "s", Memory: "m", ManageSoul: true, Deployment: "container", RunnerImage: "runner:1"}
	var m agentModel
	fromRuntime(&m, &in, meta)
	if !m.LLM.Attributes()["api_key"].IsNull() {
		t.Fatal("the API key was read back into the model")
	}
	var diags diag.Diagnostics
	ri, known := toRuntime(ctx, m, in.Workspace, in.Listen, in.Token, "sk", &diags)
	if !known || diags.HasError() {
		t.Fatalf("toRuntime: known=%v %v", known, diags)
	}
	if !reflect.DeepEqual(ri.Config, in) {
		t.Errorf("round trip:\n got %+v\nwant %+v", ri.Config, in)
	}
	if ri.RunnerImage != "runner:1" || ri.Deployment != "container" || ri.Threegate != nil {
		t.Errorf("settings: %+v", ri)
	}
	// Without runner.image the runner runs container_mode.image.
	meta.RunnerImage = ""
	fromRuntime(&m, &in, meta)
	if ri, _ := toRuntime(ctx, m, in.Workspace, in.Listen, in.Token, "", &diags); ri.RunnerImage != "img:1" {
		t.Errorf("runner image %q", ri.RunnerImage)
	}
}
