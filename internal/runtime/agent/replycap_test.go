package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// A model answer of 6 MB, in the reply and again in its step, is cut to
// fit the reply cap: the steps give up their text first, the reply keeps
// its start and says how much was cut; a reply within the cap is left
// alone.
func TestFitReply(t *testing.T) {
	answer := "start:" + strings.Repeat("é0123456789abcd<", 6_000_000/17)
	rep := &Reply{MessageID: "msg-1", Reply: answer, Steps: []Step{
		{ToolCalls: []ToolCall{{Name: "shell", Input: `{"command":"x"}`, Output: strings.Repeat("o", 3_000_000)}}},
		{Text: answer},
	}}
	if !FitReply(rep, agentspec.MaxReplyBytes) {
		t.Fatal("a 15 MB reply was not cut")
	}
	raw, err := json.Marshal(rep)
	if err != nil || len(raw)+1 > agentspec.MaxReplyBytes {
		t.Fatalf("cut reply is %d bytes (%v), over the cap %d", len(raw), err, agentspec.MaxReplyBytes)
	}
	head, note, ok := strings.Cut(rep.Reply, ReplyCutMarker)
	if !ok || !strings.HasPrefix(answer, head) || len(head) < agentspec.MaxReplyBytes/4 || !strings.HasSuffix(note, " bytes]") {
		t.Errorf("reply cut to %d bytes of its start, note %q", len(head), note)
	}
	for i, s := range rep.Steps {
		if len(s.Text) > 1024 {
			t.Errorf("step %d kept %d bytes of text", i, len(s.Text))
		}
		for _, c := range s.ToolCalls {
			if len(c.Output) > 1024 {
				t.Errorf("step %d kept %d bytes of tool output", i, len(c.Output))
			}
		}
	}

	// A trace that fits beside the reply is cut only as far as needed.
	traced := &Reply{Reply: "short", Steps: []Step{{Text: strings.Repeat("t", 5<<20)}}}
	FitReply(traced, agentspec.MaxReplyBytes)
	if raw, _ := json.Marshal(traced); traced.Reply != "short" || len(traced.Steps[0].Text) < agentspec.MaxReplyBytes/4 || len(raw) > agentspec.MaxReplyBytes {
		t.Errorf("trace cut to %d bytes, reply %q, %d bytes in all", len(traced.Steps[0].Text), traced.Reply, len(raw))
	}

	small := &Reply{Reply: "hello", Steps: []Step{{Text: "hello"}}}
	if FitReply(small, agentspec.MaxReplyBytes) || small.Reply != "hello" || small.Steps[0].Text != "hello" {
		t.Errorf("a small reply was changed: %+v", small)
	}
}
