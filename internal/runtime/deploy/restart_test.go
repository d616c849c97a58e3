package deploy

import (
	"reflect"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// TestHashLeavesOutReloadedImage: a container-mode runner with an image of
// its own keeps its config hash (so it is not replaced) when only the
// per-message image changes; a runner that runs from container_mode.image,
// a host-mode agent's runner and an external one are hashed with it.
func TestHashLeavesOutReloadedImage(t *testing.T) {
	s := NewService(Options{StateDir: t.TempDir(), Version: "0.1.0-test"})
	key := []byte("0123456789abcdef0123456789abcdef")
	agent := func(enabled bool, runnerImage, deployment, image string) agentspec.Agent {
		return agentspec.Agent{
			Config: agentspec.Config{AgentID: "a", Token: "t", Container: agentspec.ContainerMode{Enabled: enabled, Image: image, MemoryLimit: agentspec.SizeOf(512 << 20)}},
			Meta:   agentspec.Meta{RunnerImage: runnerImage, Deployment: deployment},
		}
	}
	for _, tc := range []struct {
		name                string
		enabled             bool
		runnerImage, deploy string
		same                bool
	}{
		{"own runner image", true, "runner:1", agentspec.ModeContainer, true},
		{"own runner image, the per-message one at first", true, "img:1", agentspec.ModeContainer, true},
		{"runner runs container_mode.image", true, "", agentspec.ModeContainer, false},
		{"host mode", false, "runner:1", agentspec.ModeContainer, false},
		{"external", true, "runner:1", agentspec.ModeExternal, false},
	} {
		a, b := agent(tc.enabled, tc.runnerImage, tc.deploy, "img:1"), agent(tc.enabled, tc.runnerImage, tc.deploy, "img:2")
		if same := s.hash(a, key) == s.hash(b, key); same != tc.same {
			t.Errorf("%s: same hash for a new per-message image = %t, want %t", tc.name, same, tc.same)
		}
	}
	// Anything else of the config still changes it.
	a := agent(true, "runner:1", agentspec.ModeContainer, "img:1")
	b := a
	b.Config.Container.MemoryLimit = agentspec.SizeOf(1 << 30)
	if s.hash(a, key) == s.hash(b, key) {
		t.Error("a new memory_limit kept the hash")
	}
}

// TestChangedInputs names changed settings in the schema's terms, and
// leaves out the secret values and what the service fills in.
func TestChangedInputs(t *testing.T) {
	a := agentspec.Agent{Config: agentspec.Config{AgentID: "a", Token: "t1", Listen: "unix:///x.sock", Workspace: "/w",
		Container: agentspec.ContainerMode{Enabled: true, Image: "img:1"}, LLMLimits: agentspec.LLMLimits{MaxTokensPerCall: 10},
		Secrets: map[string]string{"A": "1"}}}
	b := a
	b.Config.Token, b.Config.Workspace, b.Config.LLM.APIKey, b.Config.Secrets = "t2", "", "sk", map[string]string{"A": "2"}
	if got := ChangedInputs(a, b); len(got) != 0 {
		t.Errorf("secret values and the workspace: %v", got)
	}
	b.Config.Container.Image, b.Config.LLMLimits.MaxTokensPerCall, b.Config.Listen, b.Config.MaxSteps = "img:2", 20, "127.0.0.1:9000", 3
	b.Meta.RunnerImage, b.Config.Secrets = "runner:1", map[string]string{"B": "1"}
	want := []string{"container_mode.image", "llm.max_steps", "llm.max_tokens_per_call", "runner.image", "runner.listen", "secrets"}
	if got := ChangedInputs(a, b); !reflect.DeepEqual(got, want) {
		t.Errorf("ChangedInputs = %v, want %v", got, want)
	}
}
