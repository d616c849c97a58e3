package provider

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccAgent_workspaceLostWarning: a workspace removed outside Terraform
// is drift, and the apply that makes it again warns that its contents were
// lost. terraform-plugin-testing hands a test no warnings, so this test is
// Terraform itself: it drives the real provider server over protocol 6 (the
// calls and values terraform would send: validate, plan, apply, read, plan,
// apply) and reads the diagnostics each call returns. The runner runs
// "external" (no runner container to wait for); the daemon is asked only
// whether an old runner container is in the way.
func TestAccAgent_workspaceLostWarning(t *testing.T) {
	testutil.RequireDocker(t)
	testutil.Docker(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	id := "tf-acc-agent-wslost" + "-" + runID
	wsPath := filepath.Join(stateDir, "agents", id)

	srv, err := providerserver.NewProtocol6WithError(New("0.1.0-test")())()
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := srv.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil || diagsError(schemas.Diagnostics) != nil {
		t.Fatalf("schema: %v %v", err, diagsError(schemas.Diagnostics))
	}
	providerType := schemas.Provider.ValueType()
	agentType := schemas.ResourceSchemas["meepa_agent"].ValueType()
	dv := func(typ tftypes.Type, v tftypes.Value) *tfprotov6.DynamicValue {
		t.Helper()
		d, err := tfprotov6.NewDynamicValue(typ, v)
		if err != nil {
			t.Fatal(err)
		}
		return &d
	}
	str := func(s string) tftypes.Value { return tftypes.NewValue(tftypes.String, s) }

	conf, err := srv.ConfigureProvider(ctx, &tfprotov6.ConfigureProviderRequest{
		Config: dv(providerType, objectWith(providerType, map[string]tftypes.Value{"state_dir": str(stateDir)})),
	})
	if err != nil || diagsError(conf.Diagnostics) != nil {
		t.Fatalf("configure: %v %v", err, diagsError(conf.Diagnostics))
	}

	agentAttrs := agentType.(tftypes.Object).AttributeTypes
	llm := func(apiKey tftypes.Value) tftypes.Value {
		return objectWith(agentAttrs["llm"], map[string]tftypes.Value{"provider": str("offline"), "api_key": apiKey})
	}
	// The configuration; in the proposed new state, as terraform sends
	// it, the write-only api_key is null.
	attrs := map[string]tftypes.Value{
		"agent_id": str(id),
		"soul":     str("You are a test agent."),
		"memory":   str("Nothing yet."),
		"llm":      llm(str(testAPIKey)),
		"runner":   objectWith(agentAttrs["runner"], map[string]tftypes.Value{"deployment": str("external")}),
	}
	config := objectWith(agentType, attrs)
	attrs["llm"] = llm(tftypes.NewValue(tftypes.String, nil))
	proposed := objectWith(agentType, attrs)
	nullState := tftypes.NewValue(agentType, nil)

	val, err := srv.ValidateResourceConfig(ctx, &tfprotov6.ValidateResourceConfigRequest{
		TypeName: "meepa_agent", Config: dv(agentType, config),
		ClientCapabilities: &tfprotov6.ValidateResourceConfigClientCapabilities{WriteOnlyAttributesAllowed: true},
	})
	if err != nil || diagsError(val.Diagnostics) != nil {
		t.Fatalf("validate: %v %v", err, diagsError(val.Diagnostics))
	}
	// plan and apply as terraform does; apply returns its diagnostics.
	plan := func(prior, proposed tftypes.Value) tftypes.Value {
		t.Helper()
		resp, err := srv.PlanResourceChange(ctx, &tfprotov6.PlanResourceChangeRequest{
			TypeName: "meepa_agent", PriorState: dv(agentType, prior), ProposedNewState: dv(agentType, proposed), Config: dv(agentType, config),
		})
		if err != nil || diagsError(resp.Diagnostics) != nil {
			t.Fatalf("plan: %v %v", err, diagsError(resp.Diagnostics))
		}
		v, err := resp.PlannedState.Unmarshal(agentType)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	apply := func(prior, planned tftypes.Value) (tftypes.Value, []*tfprotov6.Diagnostic) {
		t.Helper()
		resp, err := srv.ApplyResourceChange(ctx, &tfprotov6.ApplyResourceChangeRequest{
			TypeName: "meepa_agent", PriorState: dv(agentType, prior), PlannedState: dv(agentType, planned), Config: dv(agentType, config),
		})
		if err != nil || diagsError(resp.Diagnostics) != nil {
			t.Fatalf("apply: %v %v", err, diagsError(resp.Diagnostics))
		}
		v, err := resp.NewState.Unmarshal(agentType)
		if err != nil {
			t.Fatal(err)
		}
		return v, resp.Diagnostics
	}
	state, diags := apply(nullState, plan(nullState, proposed))
	if w := warningsOf(diags); len(w) != 0 {
		t.Fatalf("create warned: %s", diagText(w))
	}
	if err := checkWorkspace(wsPath); err != nil {
		t.Fatal(err)
	}
	if got := attrString(t, state, "workspace_path"); got != wsPath {
		t.Fatalf("workspace_path %q, want %q", got, wsPath)
	}

	read := func(cur tftypes.Value) tftypes.Value {
		t.Helper()
		resp, err := srv.ReadResource(ctx, &tfprotov6.ReadResourceRequest{TypeName: "meepa_agent", CurrentState: dv(agentType, cur)})
		if err != nil || diagsError(resp.Diagnostics) != nil {
			t.Fatalf("read: %v %v", err, diagsError(resp.Diagnostics))
		}
		if w := warningsOf(resp.Diagnostics); len(w) != 0 {
			t.Fatalf("read warned: %s", diagText(w))
		}
		v, err := resp.NewState.Unmarshal(agentType)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// An apply with the workspace in place does not warn.
	state = read(state)
	if _, diags = apply(state, plan(state, state)); len(warningsOf(diags)) != 0 {
		t.Fatalf("an apply with the workspace in place warned: %s", diagText(warningsOf(diags)))
	}

	// The workspace goes outside Terraform: the refresh shows it missing,
	// the plan brings its path back, the apply makes it again and warns.
	if err := os.RemoveAll(wsPath); err != nil {
		t.Fatal(err)
	}
	state = read(state)
	if got := attrString(t, state, "workspace_path"); got != "" {
		t.Fatalf("refreshed workspace_path %q for a missing workspace, want \"\" (drift)", got)
	}
	planned := plan(state, state)
	if got := attrString(t, planned, "workspace_path"); got != wsPath {
		t.Fatalf("planned workspace_path %q, want %q", got, wsPath)
	}
	_, diags = apply(state, planned)
	w := warningsOf(diags)
	if len(w) != 1 || w[0].Summary != "Workspace Recreated" ||
		!strings.Contains(w[0].Detail, wsPath) || !strings.Contains(w[0].Detail, "lost outside Terraform") {
		t.Fatalf("warnings %s, want one \"Workspace Recreated\" naming %s and saying its contents were lost outside Terraform", diagText(w), wsPath)
	}
	if err := checkWorkspace(wsPath); err != nil {
		t.Fatalf("workspace not made again: %v", err)
	}
}

// objectWith is a value of the object type typ with the given attributes
// and every other one null, as terraform sends unset attributes.
func objectWith(typ tftypes.Type, set map[string]tftypes.Value) tftypes.Value {
	ot := typ.(tftypes.Object)
	vals := make(map[string]tftypes.Value, len(ot.AttributeTypes))
	for name, at := range ot.AttributeTypes {
		if v, ok := set[name]; ok {
			vals[name] = v
		} else {
			vals[name] = tftypes.NewValue(at, nil)
		}
	}
	return tftypes.NewValue(ot, vals)
}

// attrString is a top-level string attribute of an object value; "" when
// null.
func attrString(t *testing.T, obj tftypes.Value, name string) string {
	t.Helper()
	var m map[string]tftypes.Value
	if err := obj.As(&m); err != nil {
		t.Fatal(err)
	}
	var s *string
	if err := m[name].As(&s); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if s == nil {
		return ""
	}
	return *s
}

// diagsError joins the error diagnostics; nil when there are none.
func diagsError(ds []*tfprotov6.Diagnostic) error {
	var errs []*tfprotov6.Diagnostic
	for _, d := range ds {
		if d.Severity == tfprotov6.DiagnosticSeverityError {
			errs = append(errs, d)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.New(diagText(errs))
}

// diagText is "Summary: Detail" of each diagnostic, in brackets.
func diagText(ds []*tfprotov6.Diagnostic) string {
	msgs := make([]string, len(ds))
	for i, d := range ds {
		msgs[i] = "[" + d.Summary + ": " + d.Detail + "]"
	}
	return strings.Join(msgs, " ")
}

func warningsOf(ds []*tfprotov6.Diagnostic) []*tfprotov6.Diagnostic {
	var w []*tfprotov6.Diagnostic
	for _, d := range ds {
		if d.Severity == tfprotov6.DiagnosticSeverityWarning {
			w = append(w, d)
		}
	}
	return w
}
