package deploy

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// ResolveAsk takes fetch and tool_exec agents of the same topology, with
// their runners' listen and token, and refuses anything else by name.
func TestResolveAsk(t *testing.T) {
	state := t.TempDir()
	write := func(id, role string, nets ...string) {
		l := LayoutFor(state, id)
		if err := os.MkdirAll(l.Dir, 0o700); err != nil {
			t.Fatal(err)
		}
		c := &agentspec.Config{AgentID: id, Role: role, Listen: "unix://" + l.Socket, Token: "tok-" + id}
		c.Container.Networks = nets
		if err := agentspec.WriteConfig(l.ConfigFile, c); err != nil {
			t.Fatal(err)
		}
	}
	write("te", "tool_exec", "tg-llmnet")
	write("fe", "fetch", "tg-llmnet", "tg-fetchnet")
	write("other-te", "tool_exec", "tg2-llmnet")
	write("core2", "core", "tg-llmnet")

	got, err := ResolveAsk(state, "tg", []string{"te", "fe"})
	if err != nil || len(got) != 2 || got[0].Token != "tok-te" || got[1].Role != "fetch" || !strings.HasSuffix(got[0].Listen, "/runners/te/run/runner.sock") {
		t.Fatalf("ResolveAsk = %+v, %v", got, err)
	}
	for id, want := range map[string]string{"other-te": `not in the threegate_network "tg"`, "core2": `role is "core"`, "ghost": "not deployed yet"} {
		_, err := ResolveAsk(state, "tg", []string{id})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ask %s: %v, want %q", id, err, want)
		}
		if (id == "ghost") != errors.Is(err, ErrAskTargetNotDeployed) {
			t.Errorf("ask %s: ErrAskTargetNotDeployed = %v", id, errors.Is(err, ErrAskTargetNotDeployed))
		}
	}
	// The asking runner's container mounts the targets' socket directories.
	c := agentspec.Config{Ask: got}
	if hp := askHostPaths(c); len(hp) != 2 || !strings.HasSuffix(hp[0].Path, "/runners/te/run") {
		t.Errorf("host paths %+v", hp)
	}
}
