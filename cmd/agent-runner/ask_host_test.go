package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

// A CORE agent asks its TOOL-EXEC agent through the runners (host mode,
// offline provider): the answer comes back as untrusted tool output, both
// audit lines carry the linked message ids, an agent outside CORE's ask
// list is refused, and CORE itself has no shell.
func TestHostModeCoreAsksToolExec(t *testing.T) {
	if landlock.DetectABI() < landlock.MinNetABI {
		t.Skip("kernel without Landlock ABI 4")
	}
	te := &agentspec.Config{AgentID: "tf-ask-te", Role: "tool_exec", Container: agentspec.ContainerMode{TimeoutSeconds: 60}}
	te.LLM.Provider = "offline"
	_, teLogs := hostServeConfig(t, te)

	core := &agentspec.Config{
		AgentID: "tf-ask-core", Role: "core", Container: agentspec.ContainerMode{TimeoutSeconds: 60},
		Ask: []agentspec.AskTarget{{AgentID: te.AgentID, Role: "tool_exec", Listen: te.Listen, Token: te.Token}},
	}
	core.LLM.Provider = "offline"
	c, coreLogs := hostServeConfig(t, core)

	status, m := post(t, c, "!ask tf-ask-te !sh echo $((6*7))")
	reply := fmt.Sprint(m["reply"])
	if status != 200 || !strings.Contains(reply, "exit 0\n42") || !strings.Contains(reply, "untrusted content from agent tf-ask-te") {
		t.Fatalf("ask: %d %v\ncore:\n%s\ntool-exec:\n%s", status, m, coreLogs.String(), teLogs.String())
	}
	coreID := fmt.Sprint(m["message_id"])
	askID := regexp.MustCompile(`message (msg-[0-9a-f]+)\)`).FindStringSubmatch(reply)
	if askID == nil {
		t.Fatalf("no asked message id in %q", reply)
	}
	if !logged(teLogs, "parent_message_id="+coreID) {
		t.Errorf("TOOL-EXEC's audit line does not name the asking message %s:\n%s", coreID, teLogs.String())
	}
	if !logged(coreLogs, "ask_message_ids="+askID[1]) {
		t.Errorf("CORE's audit line does not name the asked message %s:\n%s", askID[1], coreLogs.String())
	}

	for text, want := range map[string]string{
		"!ask tf-nobody hello": "is not one this agent may ask",
		"!sh echo ran":         "not available to this CORE agent",
		"!fetch http://x/":     "not available to this CORE agent",
	} {
		if status, m := post(t, c, text); status != 200 || !strings.Contains(fmt.Sprint(m["reply"]), want) {
			t.Errorf("%q: %d %v, want %q", text, status, m, want)
		}
	}
	if !logged(coreLogs, "tools_refused=1") {
		t.Errorf("CORE's audit line does not count the refused tool calls:\n%s", coreLogs.String())
	}
}
