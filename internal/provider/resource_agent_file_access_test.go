package provider

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
)

// TestAgentPlan_fileAccessHostModeOnly: file_access governs host mode
// only. A container-mode agent that does not set it plans none (it used to
// plan host mode's defaults, allow_network = true, in every plan); a
// host-mode agent still plans the defaults; one that sets it plans what it
// set. No daemon: the plan alone answers.
func TestAgentPlan_fileAccessHostModeOnly(t *testing.T) {
	tfresource.UnitTest(t, tfresource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []tfresource.TestStep{{
			Config: `
provider "meepa" {
  state_dir = "/nonexistent/meepa-plan-only"
}

resource "meepa_agent" "container" {
  agent_id       = "plan-fa-container"
  llm            = { provider = "offline" }
  container_mode = { enabled = true, image = "meepagateway-isolated:1", network = "none" }
}

resource "meepa_agent" "container_set" {
  agent_id       = "plan-fa-set"
  llm            = { provider = "offline" }
  container_mode = { enabled = true, image = "meepagateway-isolated:1", network = "none" }
  file_access    = { allow_network = false }
}

resource "meepa_agent" "host" {
  agent_id       = "plan-fa-host"
  llm            = { provider = "offline" }
  container_mode = { enabled = false }
  runner         = { deployment = "external" }
}
`,
			PlanOnly: true, ExpectNonEmptyPlan: true,
			ConfigPlanChecks: tfresource.ConfigPlanChecks{PostApplyPreRefresh: []plancheck.PlanCheck{
				plancheck.ExpectKnownValue("meepa_agent.container", tfjsonpath.New("file_access"), knownvalue.Null()),
				plancheck.ExpectKnownValue("meepa_agent.container_set", tfjsonpath.New("file_access").AtMapKey("allow_network"), knownvalue.Bool(false)),
				plancheck.ExpectKnownValue("meepa_agent.host", tfjsonpath.New("file_access").AtMapKey("allow_network"), knownvalue.Bool(true)),
				plancheck.ExpectKnownValue("meepa_agent.host", tfjsonpath.New("file_access").AtMapKey("allow_read"), knownvalue.ListExact(nil)),
			}},
		}},
	})
}

// TestAgentState_upgradeFromV0: a state the previous release wrote
// (testdata/agent_state_v0_container.json: terraform apply with the build
// at 8845b1d, a container-mode agent without file_access, which held the
// host defaults) is read by this one: file_access becomes null, every
// other attribute stays as it was, and a plan of the same configuration
// keeps it null, so the first plan after the upgrade shows no file_access
// change.
func TestAgentState_upgradeFromV0(t *testing.T) {
	ctx := context.Background()
	var fixture struct {
		SchemaVersion int64           `json:"schema_version"`
		Attributes    json.RawMessage `json:"attributes"`
	}
	raw, err := os.ReadFile("testdata/agent_state_v0_container.json")
	if err == nil {
		err = json.Unmarshal(raw, &fixture)
	}
	if err != nil || fixture.SchemaVersion != 0 {
		t.Fatalf("fixture: %v (schema_version %d)", err, fixture.SchemaVersion)
	}
	srv, err := providerserver.NewProtocol6WithError(New("0.1.0-test")())()
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := srv.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil || diagsError(schemas.Diagnostics) != nil {
		t.Fatalf("schema: %v %v", err, diagsError(schemas.Diagnostics))
	}
	if v := schemas.ResourceSchemas["meepa_agent"].Version; v != 1 {
		t.Fatalf("meepa_agent schema version %d, want 1", v)
	}
	agentType := schemas.ResourceSchemas["meepa_agent"].ValueType()
	up, err := srv.UpgradeResourceState(ctx, &tfprotov6.UpgradeResourceStateRequest{
		TypeName: "meepa_agent", Version: 0, RawState: &tfprotov6.RawState{JSON: fixture.Attributes},
	})
	if err != nil || diagsError(up.Diagnostics) != nil {
		t.Fatalf("upgrade: %v %v", err, diagsError(up.Diagnostics))
	}
	got, err := up.UpgradedState.Unmarshal(agentType)
	if err != nil {
		t.Fatal(err)
	}
	old, err := (&tfprotov6.RawState{JSON: fixture.Attributes}).UnmarshalWithOpts(agentType, tfprotov6.UnmarshalOpts{})
	if err != nil {
		t.Fatal(err)
	}
	var gotAttrs, oldAttrs map[string]tftypes.Value
	if err := got.As(&gotAttrs); err != nil {
		t.Fatal(err)
	}
	if err := old.As(&oldAttrs); err != nil {
		t.Fatal(err)
	}
	if !gotAttrs["file_access"].IsNull() {
		t.Errorf("file_access after the upgrade: %v, want null", gotAttrs["file_access"])
	}
	for name, v := range oldAttrs {
		if name != "file_access" && !v.Equal(gotAttrs[name]) {
			t.Errorf("%s changed in the upgrade: %v -> %v", name, v, gotAttrs[name])
		}
	}

	// The plan of the unchanged configuration (file_access unset) keeps it.
	r := &agentResource{}
	var sr resource.SchemaResponse
	r.Schema(ctx, resource.SchemaRequest{}, &sr)
	config := got.Copy()
	req := resource.ModifyPlanRequest{
		Config: tfsdk.Config{Schema: sr.Schema, Raw: config},
		Plan:   tfsdk.Plan{Schema: sr.Schema, Raw: got},
		State:  tfsdk.State{Schema: sr.Schema, Raw: got},
	}
	resp := &resource.ModifyPlanResponse{Plan: req.Plan}
	r.ModifyPlan(ctx, req, resp)
	var fa types.Object
	resp.Diagnostics.Append(resp.Plan.GetAttribute(ctx, path.Root("file_access"), &fa)...)
	if resp.Diagnostics.HasError() || !fa.IsNull() {
		t.Errorf("planned file_access %v (%v), want null as in state", fa, resp.Diagnostics)
	}
}
