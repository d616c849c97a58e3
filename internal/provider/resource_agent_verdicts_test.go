package provider

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

// TestPlanAndRunnerAgree feeds the same agent settings to the plan's
// validation (what meepa_agent's ValidateConfig runs on the configuration)
// and to the runner's start (`agent-runner serve`: LoadConfig of the file
// apply writes, then the checks runner.New makes before it listens), and
// requires the same verdict from both, and the expected one. The plan may
// refuse more only where the schema refuses an explicit zero or empty value
// that the config file reads as "the default"; those are not in this table.
// The typed settings (memory_limit, user) are given as the text the owner
// writes (texts): the plan parses it from the attribute, the runner from
// the file.
func TestPlanAndRunnerAgree(t *testing.T) {
	container := func(c *agentspec.Config) { c.Container.Enabled = true }
	texts := []struct {
		name      string
		change    func(c *agentspec.Config)
		attr, val string
		ok        bool
	}{
		{"root user, container mode", container, "user", "0:0", false},
		{"root user, host mode", nil, "user", "0:0", false},
		{"root group", container, "user", "1000:0", false},
		{"user name", nil, "user", "nobody", false},
		{"uid alone", container, "user", "1000", true},
		{"nobody named, container mode", container, "user", "65534:65534", false},
		{"64m, host mode", nil, "memory_limit", "64m", false},
		{"64m, container mode", container, "memory_limit", "64m", true},
		{"128m, host mode", nil, "memory_limit", "128m", true},
		{"1G, host mode", nil, "memory_limit", "1G", true},
		{"5m, container mode", container, "memory_limit", "5m", false},
		{"memory unit", nil, "memory_limit", "512x", false},
		{"memory fraction", nil, "memory_limit", "1.5g", false},
		{"memory zero", nil, "memory_limit", "0", false},
	}
	cases := []struct {
		name   string
		change func(c *agentspec.Config)
		ok     bool
	}{
		{"defaults, host mode", func(c *agentspec.Config) {}, true},
		{"defaults, container mode", container, true},
		{"timeout huge", func(c *agentspec.Config) { c.Container.TimeoutSeconds = agentspec.MaxTimeoutSeconds + 1 }, false},
		{"timeout negative", func(c *agentspec.Config) { c.Container.TimeoutSeconds = -1 }, false},
		{"timeout max", func(c *agentspec.Config) { c.Container.TimeoutSeconds = agentspec.MaxTimeoutSeconds }, true},
		{"pids low", func(c *agentspec.Config) { c.Container.PidsLimit = agentspec.MinPidsLimit - 1 }, false},
		{"pids high", func(c *agentspec.Config) { c.Container.PidsLimit = agentspec.MaxPidsLimit + 1 }, false},
		{"network host", func(c *agentspec.Config) { c.Container.Network = "host" }, false},
		{"network none", func(c *agentspec.Config) { c.Container.Network = "none" }, true},
		{"runtime unknown", func(c *agentspec.Config) { c.Container.Runtime = "kata" }, false},
		{"max steps high", func(c *agentspec.Config) { c.MaxSteps = agentspec.MaxMaxSteps + 1 }, false},
		{"relative allow_read", func(c *agentspec.Config) { c.FileAccess.AllowRead = []string{"data"} }, false},
		{"unclean deny", func(c *agentspec.Config) { c.FileAccess.Deny = []string{"/srv/../etc"} }, false},
		{"deny with unrestricted", func(c *agentspec.Config) {
			c.FileAccess.Unrestricted = true
			c.FileAccess.Deny = []string{"/srv/secret"}
		}, false},
		{"inject secrets", func(c *agentspec.Config) { c.InjectSecretsEnv = true }, false},
		{"unbound secret of any name", func(c *agentspec.Config) { c.Secrets = map[string]string{"gh-token": "x"} }, true},
		{"bound secret", func(c *agentspec.Config) { bind(c, "API_TOKEN") }, true},
		{"bound secret name", func(c *agentspec.Config) { bind(c, "gh-token") }, false},
		{"reserved bound name", func(c *agentspec.Config) { bind(c, "HOME") }, false},
		{"binding without network", func(c *agentspec.Config) {
			bind(c, "API_TOKEN")
			c.FileAccess.AllowNetwork = false
		}, false},
		{"binding of no secret", func(c *agentspec.Config) {
			bind(c, "API_TOKEN")
			c.Secrets = nil
		}, false},
	}
	type text struct{ attr, val string }
	var all []struct {
		name   string
		change func(c *agentspec.Config)
		text   *text
		ok     bool
	}
	for _, tc := range cases {
		all = append(all, struct {
			name   string
			change func(c *agentspec.Config)
			text   *text
			ok     bool
		}{tc.name, tc.change, nil, tc.ok})
	}
	for _, tc := range texts {
		change := tc.change
		if change == nil {
			change = func(*agentspec.Config) {}
		}
		all = append(all, struct {
			name   string
			change func(c *agentspec.Config)
			text   *text
			ok     bool
		}{tc.name, change, &text{tc.attr, tc.val}, tc.ok})
	}
	state := t.TempDir()
	for _, tc := range all {
		t.Run(tc.name, func(t *testing.T) {
			c := agentspec.Config{
				AgentID:   "a1",
				Workspace: filepath.Join(state, "agents", "a1"),
				Listen:    "unix://" + filepath.Join(state, "runners", "a1", "run", "runner.sock"),
				Token:     "tok",
				Container: agentspec.ContainerMode{
					Image: "img:1", MemoryLimit: agentspec.SizeOf(agentspec.DefaultMemoryBytes), TimeoutSeconds: agentspec.DefaultTimeoutSeconds,
					Network: agentspec.DefaultNetwork, PidsLimit: agentspec.DefaultPidsLimit,
					Runtime: agentspec.DefaultRuntime, Prestart: true,
				},
				FileAccess:           landlock.FileAccess{AllowNetwork: true},
				LLM:                  agentspec.LLMConfig{Provider: "offline"},
				InjectCredentialsEnv: true, RedactSecrets: true,
				MaxSteps: agentspec.DefaultMaxSteps,
			}
			tc.change(&c)
			var attr, val string
			if tc.text != nil {
				attr, val = tc.text.attr, tc.text.val
			}
			plan := planVerdict(t, c, attr, val)
			start := runnerVerdict(t, c, attr, val)
			if (plan == nil) != (start == nil) {
				t.Fatalf("the plan and the runner disagree:\n plan:   %v\n runner: %v", plan, start)
			}
			if (plan == nil) != tc.ok {
				t.Fatalf("verdict %v, want ok=%v", plan, tc.ok)
			}
		})
	}
}

// planVerdict is what meepa_agent's ValidateConfig says of a configuration
// that holds c's settings, and the text val in container_mode's name
// unless name is "".
func planVerdict(t *testing.T, c agentspec.Config, name, val string) error {
	t.Helper()
	var m agentModel
	modelOf(&m, agentspec.Agent{Config: c, Meta: agentspec.Meta{Deployment: agentspec.ModeContainer}})
	if name != "" {
		attrs := m.ContainerMode.Attributes()
		attrs[name] = types.StringValue(val)
		m.ContainerMode = types.ObjectValueMust(containerModeAttrTypes, attrs)
	}
	// The configuration holds the write-only secrets that state does not.
	if len(c.Secrets) > 0 {
		vals := map[string]attr.Value{}
		for k, v := range c.Secrets {
			vals[k] = types.StringValue(v)
		}
		m.Secrets = types.MapValueMust(types.StringType, vals)
	}
	var diags diag.Diagnostics
	validateAgentConfig(context.Background(), m, &diags)
	if !diags.HasError() {
		return nil
	}
	var parts []string
	for _, d := range diags.Errors() {
		parts = append(parts, d.Summary()+": "+d.Detail())
	}
	return errorString(strings.Join(parts, "; "))
}

// bind gives c the secret k, bound to one host.
func bind(c *agentspec.Config, k string) {
	c.Secrets = map[string]string{k: "x"}
	c.SecretBindings = map[string]agentspec.SecretBinding{k: {Hosts: []string{"api.example.com"}}}
}

// runnerVerdict is what `agent-runner serve` says of the same settings at
// start: the file as apply writes it, with val in container_mode's attr
// unless attr is "", loaded and validated.
func runnerVerdict(t *testing.T, c agentspec.Config, attr, val string) error {
	t.Helper()
	file := filepath.Join(t.TempDir(), "config.json")
	if err := agentspec.WriteConfig(file, &c); err != nil {
		t.Fatal(err)
	}
	if attr != "" {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		doc["container_mode"].(map[string]any)[attr] = val
		if raw, err = json.Marshal(doc); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	loaded, err := agentspec.LoadConfig(file)
	if err != nil {
		return err
	}
	return kube.ValidateConfig(loaded)
}

type errorString string

func (e errorString) Error() string { return string(e) }

// TestAgentPlanRefusesWhatTheRunnerRefuses: through terraform, the two
// settings the plan used to accept and the runner then refused at apply
// are plan-time errors on their attributes, and nothing is made. No daemon.
func TestAgentPlanRefusesWhatTheRunnerRefuses(t *testing.T) {
	stateDir := t.TempDir()
	for _, tc := range []struct{ name, body, attr, want string }{
		{"root user", `container_mode = { enabled = true, user = "0:0" }`, "container_mode.user", `never runs as root`},
		{"host mode 64m", `container_mode = { memory_limit = "64m" }`, "container_mode.memory_limit", `below 128m.*host mode`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resource.UnitTest(t, resource.TestCase{
				TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
				ProtoV6ProviderFactories: testAccProviders,
				Steps: []resource.TestStep{{
					Config:      agentConfigWith(stateDir, tc.body),
					PlanOnly:    true,
					ExpectError: errorOn(tc.attr, tc.want),
				}},
			})
		})
	}
	if entries, _ := os.ReadDir(stateDir); len(entries) != 0 {
		t.Fatalf("state dir not empty after plan-time errors: %v", entries)
	}
}
