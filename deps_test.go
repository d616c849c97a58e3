package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProviderLinksNoAgentRuntime: the provider only describes agents, so
// its binary must not link what runs them: the LLM SDKs, the agent loop's
// sqlite, the agent loop itself or the runner's server. One import of the
// wrong package (a helper that lives beside the runtime) pulls all of it
// back in, which no other test would notice.
func TestProviderLinksNoAgentRuntime(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const mod = "github.com/bogpad/terraform-provider-meepa/"
	banned := []string{"anthropic", "openai", "sqlite"}
	own := []string{mod + "internal/runtime/agent", mod + "internal/runtime/runner"}
	var bad []string
	for _, p := range strings.Fields(string(out)) {
		for _, b := range banned {
			if strings.Contains(p, b) {
				bad = append(bad, p)
			}
		}
		for _, o := range own {
			if p == o || strings.HasPrefix(p, o+"/") {
				bad = append(bad, p)
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("the provider links %d packages of the agent runtime, e.g. %s", len(bad), strings.Join(bad[:min(len(bad), 5)], ", "))
	}
}
