package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// A sandbox prepared while the message before it still ran (a prestarted
// container) answers from the workspace as it is when its own message
// comes: the earlier message's memory rows and a SOUL.md written after the
// prepare are both seen.
func TestPreparedSeesWhatCameAfterIt(t *testing.T) {
	ws := t.TempDir()
	ctx := context.Background()
	p := Prepare(ctx, ws)
	if p.err != nil {
		t.Fatal(p.err)
	}
	if _, err := os.Stat(filepath.Join(ws, MemoryFile)); err != nil {
		t.Fatalf("prepare did not open memory.db: %v", err)
	}
	c := &scripted{next: func(n int, c Completion) (Answer, error) {
		return Answer{Text: "answer " + c.Messages[len(c.Messages)-1].Text}, nil
	}}
	req := offlineReq("first")
	req.LLM = agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "m"}
	if rep := Run(ctx, &req, Options{Workspace: ws, Client: c}); rep.ErrorKind != "" {
		t.Fatal(rep.Error)
	}
	if err := os.WriteFile(filepath.Join(ws, "SOUL.md"), []byte("soul written late"), 0o644); err != nil {
		t.Fatal(err)
	}
	req.Message.Text, req.Message.ID = "second", "m2"
	rep := Run(ctx, &req, Options{Workspace: ws, Client: c, Prepared: p})
	if rep.ErrorKind != "" || rep.Reply != "answer second" {
		t.Fatalf("prepared run: %+v", rep)
	}
	last := c.calls[len(c.calls)-1]
	var got []string
	for _, m := range last.Messages {
		got = append(got, m.Role+":"+m.Text)
	}
	if strings.Join(got, "|") != "user:first|assistant:answer first|user:second" {
		t.Errorf("history seen by the prepared run = %v", got)
	}
	if !strings.Contains(last.System, "soul written late") {
		t.Errorf("the system prompt misses the SOUL.md written after prepare:\n%s", last.System)
	}
	if p.mem != nil || p.tb != nil {
		t.Error("Run did not close what it took over")
	}
}

// A workspace that was not ready when the sandbox prepared is prepared
// again when the message comes; one that is still not ready fails as a
// workspace error.
func TestPrepareFailureIsRetriedAtRun(t *testing.T) {
	ctx := context.Background()
	ws := filepath.Join(t.TempDir(), "later")
	p := Prepare(ctx, ws)
	if p.err == nil {
		t.Fatal("prepare of a missing workspace succeeded")
	}
	if rep := Run(ctx, ptr(offlineReq("hi")), Options{Workspace: ws, Prepared: p}); rep.ErrorKind != ErrKindWorkspace {
		t.Fatalf("missing workspace: %+v", rep)
	}
	p = Prepare(ctx, ws)
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if rep := Run(ctx, ptr(offlineReq("hi")), Options{Workspace: ws, Prepared: p}); rep.ErrorKind != "" {
		t.Fatalf("workspace made after prepare: %+v", rep)
	}
}

// A request that cannot be decoded still releases what was prepared.
func TestRunJSONClosesPreparedOnBadRequest(t *testing.T) {
	p := Prepare(context.Background(), t.TempDir())
	rep := RunJSON(context.Background(), []byte("{not json"), Options{Workspace: "x", Prepared: p})
	if rep.ErrorKind != ErrKindRequest || p.mem != nil || p.tb != nil {
		t.Fatalf("reply %+v, prepared still open: %v", rep, p.mem != nil)
	}
}

func TestFinalReply(t *testing.T) {
	for in, want := range map[string]bool{
		`{"reply":"x","final":true}` + "\n":                    true,
		`{"reply":"x","final":true}` + "\n  \n":                true,
		`{"reply":"x","final":true}`:                           false, // line not complete
		`{"reply":"x"}` + "\n":                                 false,
		`{"reply":"x","final":false}` + "\n":                   false,
		`{"reply":"x","final":true}` + "\n" + `{"more":1}`:     false,
		`garbage {"final":true}` + "\n":                        false,
		`{"reply":"x","final":"true"}` + "\n":                  false,
		`{"reply":"a\nb","final":true}` + "\n":                 true, // JSON escapes newlines in strings
		"":                                                     false,
		`{"final":true} {"final":true}` + "\n":                 false,
		`{"reply":"x","final":true,"error_kind":"llm"}` + "\n": true, // an error reply is final too
	} {
		if got := agentspec.FinalReply([]byte(in)); got != want {
			t.Errorf("FinalReply(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestOOMKillsFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v2 := write("memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 0\n")
	v1 := write("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
	none := write("other", "oom 1\n")
	if n, ok := oomKills(v2); !ok || n != 2 {
		t.Errorf("v2: %d %v", n, ok)
	}
	if n, ok := oomKills(v1); !ok || n != 0 {
		t.Errorf("v1: %d %v", n, ok)
	}
	if _, ok := oomKills(none); ok {
		t.Error("a file without oom_kill reads as counted")
	}
	if _, ok := oomKills(filepath.Join(dir, "missing")); ok {
		t.Error("a missing file reads as counted")
	}
}

func ptr[T any](v T) *T { return &v }
