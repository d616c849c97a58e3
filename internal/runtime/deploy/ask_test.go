package deploy

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// ResolveAsk takes fetch and tool_exec agents of the same topology, with
// their runners' listen and token, and refuses anything else by name.
func TestResolveAsk(t *testing.T) {
	state := t.TempDir()
	write := askWriter(t, state)
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
		if (id == "ghost") != errors.Is(err, agentspec.ErrAskTargetNotDeployed) {
			t.Errorf("ask %s: ErrAskTargetNotDeployed = %v", id, errors.Is(err, agentspec.ErrAskTargetNotDeployed))
		}
	}
	// The asking runner's container mounts the targets' socket directories.
	c := agentspec.Config{Ask: got}
	if hp := askHostPaths(c); len(hp) != 2 || !strings.HasSuffix(hp[0].Path, "/runners/te/run") {
		t.Errorf("host paths %+v", hp)
	}
}

// askWriter writes a target's runner config, as its apply does.
func askWriter(t *testing.T, state string) func(id, role string, nets ...string) {
	return func(id, role string, nets ...string) {
		t.Helper()
		l := LayoutFor(state, id)
		if err := os.MkdirAll(l.Dir, 0o700); err != nil {
			t.Fatal(err)
		}
		c := &agentspec.Config{AgentID: id, Role: role, Listen: "unix://" + l.Socket, Token: "tok-" + id}
		c.Container.Networks = nets
		if err := agentspec.WriteConfig(l.ConfigFile, c); err != nil {
			t.Error(err)
		}
	}
}

// An apply waits for a target applied beside it (one for_each), gives up
// at once on a target that can never do, and says what it waited for.
func TestWaitForAsk(t *testing.T) {
	state := t.TempDir()
	write := askWriter(t, state)
	resolve := func(ids ...string) func() ([]agentspec.AskTarget, error) {
		return func() ([]agentspec.AskTarget, error) { return ResolveAsk(state, "tg", ids) }
	}
	ctx := context.Background()

	go func() { time.Sleep(1200 * time.Millisecond); write("late", "fetch", "tg-llmnet") }()
	got, err := agentspec.WaitForAsk(ctx, time.Minute, resolve("late"))
	if err != nil || len(got) != 1 || got[0].Token != "tok-late" {
		t.Fatalf("late target: %+v, %v", got, err)
	}

	write("elsewhere", "tool_exec", "tg2-llmnet")
	start := time.Now()
	_, err = agentspec.WaitForAsk(ctx, time.Minute, resolve("ghost", "elsewhere"))
	if err == nil || !strings.Contains(err.Error(), `not in the threegate_network "tg"`) || time.Since(start) > 10*time.Second {
		t.Errorf("a target that cannot do: %v after %s, want an error at once", err, time.Since(start))
	}

	_, err = agentspec.WaitForAsk(ctx, 700*time.Millisecond, resolve("ghost"))
	if err == nil || !errors.Is(err, agentspec.ErrAskTargetNotDeployed) || !strings.Contains(err.Error(), "after waiting 700ms") {
		t.Errorf("a target never applied: %v", err)
	}
}
