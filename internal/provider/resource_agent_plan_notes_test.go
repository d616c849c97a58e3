package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
)

// planFixture is an applied container-mode agent as a refreshed state holds
// it, with its runner files (the hash key) on disk, and no daemon.
type planFixture struct {
	r     *agentResource
	state agentModel
}

func newPlanFixture(t *testing.T, edit func(*agentspec.Agent)) planFixture {
	t.Helper()
	ctx := context.Background()
	stateDir := t.TempDir()
	d := &providerData{version: "0.1.0-test", stateDir: stateDir, docker: newLazyDocker(engine.Options{})}
	d.pickBackends()
	r := &agentResource{data: d}
	a := agentspec.Agent{
		Config: agentspec.Config{
			AgentID: "plan-notes", Token: "tok",
			Container: agentspec.ContainerMode{Enabled: true, Image: "meepagateway-isolated:1", MemoryLimit: agentspec.SizeOf(agentspec.DefaultMemoryBytes),
				TimeoutSeconds: agentspec.DefaultTimeoutSeconds, Network: agentspec.DefaultNetwork, PidsLimit: agentspec.DefaultPidsLimit,
				Runtime: agentspec.DefaultRuntime, Prestart: true},
			FileAccess:           landlock.FileAccess{AllowNetwork: true},
			LLM:                  agentspec.LLMConfig{Provider: "offline"},
			InjectCredentialsEnv: true, RedactSecrets: true, MaxSteps: agentspec.DefaultMaxSteps,
			LLMLimits: agentspec.LLMLimits{}.Effective(),
		},
		Meta: agentspec.Meta{Soul: "You are the first soul.", Deployment: agentspec.ModeContainer},
	}
	if edit != nil {
		edit(&a)
	}
	if _, err := deploy.Prepare(deploy.LayoutFor(stateDir, a.Config.AgentID)); err != nil {
		t.Fatal(err)
	}
	var m agentModel
	modelOf(&m, a)
	svc, err := r.service(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := svc.Plan(ctx, a)
	m.WorkspacePath, m.Endpoint, m.ConfigHash = types.StringValue(p.WorkspacePath), types.StringValue(p.Endpoint), types.StringValue(p.ConfigHash)
	m.Runner = types.ObjectValueMust(runnerAttrTypes, map[string]attr.Value{
		"listen": types.StringValue(p.Listen), "deployment": types.StringValue(agentspec.ModeContainer), "image": types.StringValue(a.Meta.RunnerImage),
	})
	m.RunnerStatus, m.RunnerContainerID = types.StringValue(agentspec.StatusRunning), types.StringValue("c0ffee")
	m.LandlockABI, m.AgentUID = types.Int64Null(), types.Int64Null()
	if p.ConfigHash == "" {
		t.Fatal("the fixture's config hash is not known at plan")
	}
	return planFixture{r: r, state: m}
}

// plan runs ModifyPlan for a configuration that is the state changed by
// edit, with the computed values unknown as Terraform plans them for an
// update; it returns the planned model and the diagnostics.
func (f planFixture) plan(t *testing.T, edit func(*agentModel)) (agentModel, diag.Diagnostics) {
	t.Helper()
	ctx := context.Background()
	var sr resource.SchemaResponse
	f.r.Schema(ctx, resource.SchemaRequest{}, &sr)
	raw := func(m agentModel) tftypes.Value {
		st := tfsdk.State{Schema: sr.Schema, Raw: tftypes.NewValue(sr.Schema.Type().TerraformType(ctx), nil)}
		if d := st.Set(ctx, &m); d.HasError() {
			t.Fatal(d)
		}
		return st.Raw
	}
	p := f.state
	edit(&p)
	p.ID, p.WorkspacePath, p.Endpoint = types.StringUnknown(), types.StringUnknown(), types.StringUnknown()
	p.Token, p.RunnerContainerID, p.RunnerStatus, p.ConfigHash = types.StringUnknown(), types.StringUnknown(), types.StringUnknown(), types.StringUnknown()
	p.LandlockABI, p.AgentUID = types.Int64Unknown(), types.Int64Unknown()
	req := resource.ModifyPlanRequest{
		Config: tfsdk.Config{Schema: sr.Schema, Raw: raw(p)},
		Plan:   tfsdk.Plan{Schema: sr.Schema, Raw: raw(p)},
		State:  tfsdk.State{Schema: sr.Schema, Raw: raw(f.state)},
	}
	resp := &resource.ModifyPlanResponse{Plan: req.Plan}
	f.r.ModifyPlan(ctx, req, resp)
	var out agentModel
	resp.Diagnostics.Append(resp.Plan.Get(ctx, &out)...)
	return out, resp.Diagnostics
}

func planWarnings(d diag.Diagnostics, summary string) []string {
	var out []string
	for _, w := range d.Warnings() {
		if w.Summary() == summary {
			out = append(out, w.Detail())
		}
	}
	return out
}

// TestAgentPlan_soulSeedOnly: a changed soul without manage_soul is not
// written to an existing workspace, and the plan says so on soul, naming
// manage_soul (a changed memory likewise, on memory). With manage_soul, or
// for a workspace that is gone, it is written, and the plan says nothing.
func TestAgentPlan_soulSeedOnly(t *testing.T) {
	f := newPlanFixture(t, nil)
	_, d := f.plan(t, func(m *agentModel) { m.Soul = types.StringValue("You are the second soul.") })
	if d.HasError() {
		t.Fatal(d)
	}
	w := planWarnings(d, "Soul Only Seeds A New Workspace")
	if len(w) != 1 || !strings.Contains(w[0], "manage_soul = true") || !strings.Contains(w[0], f.state.WorkspacePath.ValueString()) {
		t.Fatalf("want one warning on soul naming manage_soul and the workspace, got %v", d)
	}
	for name, edit := range map[string]func(*agentModel){
		"manage_soul": func(m *agentModel) {
			m.Soul, m.ManageSoul = types.StringValue("You are the second soul."), types.BoolValue(true)
		},
		"same soul": func(m *agentModel) { m.ForceDestroyWorkspace = types.BoolValue(true) },
	} {
		if _, d := f.plan(t, edit); len(planWarnings(d, "Soul Only Seeds A New Workspace")) != 0 {
			t.Errorf("%s: %v", name, d)
		}
	}
	_, d = f.plan(t, func(m *agentModel) { m.Memory = types.StringValue("Something new.") })
	if w := planWarnings(d, "Memory Only Seeds A New Workspace"); len(w) != 1 || !strings.Contains(w[0], "MEMORY.md") {
		t.Errorf("memory: %v", d)
	}
	f.state.WorkspacePath = types.StringValue("") // Read found it gone
	if _, d := f.plan(t, func(m *agentModel) { m.Soul = types.StringValue("You are the second soul.") }); len(planWarnings(d, "Soul Only Seeds A New Workspace")) != 0 {
		t.Errorf("workspace gone: %v", d)
	}
}

// TestAgentPlan_runnerReplacedWarns: a plan that replaces the runner says
// so, naming the runner container and the settings that changed; a change
// that keeps the runner says nothing.
func TestAgentPlan_runnerReplacedWarns(t *testing.T) {
	f := newPlanFixture(t, nil)
	p, d := f.plan(t, func(m *agentModel) {
		attrs := m.ContainerMode.Attributes()
		attrs["memory_limit"] = types.StringValue("1g")
		m.ContainerMode = types.ObjectValueMust(containerModeAttrTypes, attrs)
	})
	if d.HasError() {
		t.Fatal(d)
	}
	if !p.RunnerContainerID.IsUnknown() {
		t.Fatal("a new memory_limit must replace the runner")
	}
	w := planWarnings(d, "Runner Will Be Replaced")
	if len(w) != 1 || !strings.Contains(w[0], "meepa-runner-plan-notes") || !strings.Contains(w[0], "container_mode.memory_limit") {
		t.Fatalf("want one warning naming the runner and container_mode.memory_limit, got %v", d)
	}
	// A stale runner (as after an upgrade that changed what the hash
	// covers) is replaced, and the plan says why.
	f.state.RunnerStatus = types.StringValue(agentspec.StatusStale)
	_, d = f.plan(t, func(m *agentModel) {})
	if w := planWarnings(d, "Runner Will Be Replaced"); len(w) != 1 || !strings.Contains(w[0], "provider upgrade") {
		t.Fatalf("stale: %v", d)
	}
	f.state.RunnerStatus = types.StringValue(agentspec.StatusRunning)
	p, d = f.plan(t, func(m *agentModel) { m.ForceDestroyWorkspace = types.BoolValue(true) })
	if !p.RunnerContainerID.Equal(f.state.RunnerContainerID) || len(planWarnings(d, "Runner Will Be Replaced")) != 0 {
		t.Errorf("force_destroy_workspace keeps the runner, silently: %s %v", p.RunnerContainerID, d)
	}
}

// TestAgentPlan_newImageKeepsOwnRunner: a new container_mode.image keeps
// a runner that has an image of its own (it reloads), silently; a runner
// that runs from container_mode.image is replaced, and the plan says so
// and how to avoid it.
func TestAgentPlan_newImageKeepsOwnRunner(t *testing.T) {
	newImage := func(m *agentModel) {
		attrs := m.ContainerMode.Attributes()
		attrs["image"] = types.StringValue("meepagateway-isolated:2")
		m.ContainerMode = types.ObjectValueMust(containerModeAttrTypes, attrs)
	}
	own := newPlanFixture(t, func(a *agentspec.Agent) { a.Meta.RunnerImage = "meepa-runner:1" })
	p, d := own.plan(t, newImage)
	if d.HasError() {
		t.Fatal(d)
	}
	if !p.RunnerContainerID.Equal(own.state.RunnerContainerID) || !p.ConfigHash.Equal(own.state.ConfigHash) || len(planWarnings(d, "Runner Will Be Replaced")) != 0 {
		t.Errorf("own runner image: runner %s hash %s (was %s), %v; want it kept, silently", p.RunnerContainerID, p.ConfigHash, own.state.ConfigHash, d)
	}
	shared := newPlanFixture(t, nil)
	p, d = shared.plan(t, newImage)
	w := planWarnings(d, "Runner Will Be Replaced")
	if !p.RunnerContainerID.IsUnknown() || len(w) != 1 || !strings.Contains(w[0], "container_mode.image") || !strings.Contains(w[0], "runner.image") {
		t.Errorf("runner on container_mode.image: runner %s, %v; want it replaced with a warning naming container_mode.image and runner.image", p.RunnerContainerID, d)
	}
}
