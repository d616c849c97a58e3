package main

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// A sandbox made for one role refuses a request for another: a request
// written into the wrong pod cannot widen its tools.
func TestRequestRole(t *testing.T) {
	for _, tc := range []struct {
		flag, role string
		ok         bool
	}{
		{"", "tool_exec", true}, // no --role: the runner alone hands requests (Docker, host mode)
		{"fetch", "fetch", true},
		{"fetch", "tool_exec", false},
		{"fetch", "", false},
		{"none", "", true},
		{"none", "core", false},
		{"core", "core", true},
	} {
		err := requestRole([]byte(`{"role":"`+tc.role+`"}`), tc.flag)
		if (err == nil) != tc.ok {
			t.Errorf("--role=%q, request role %q: %v", tc.flag, tc.role, err)
		}
	}
	for _, bad := range []string{"admin", "CORE"} {
		if checkRoleFlag(bad) == nil {
			t.Errorf("--role=%s accepted", bad)
		}
	}
}

// The binary end to end: a TOOL-EXEC sandbox's tools open no socket (a
// DNS query to a resolver on loopback never arrives; without --role the
// same query does), and a sandbox made for FETCH refuses a request with
// no role, whose shell it would otherwise run.
func TestAgentRunRoleFromItsOwnFlag(t *testing.T) {
	bin := testutil.RunnerBinary(t)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	testutil.Must(t, err)
	defer func() { _ = pc.Close() }()
	var got atomic.Int64
	go func() {
		buf := make([]byte, 512)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			got.Add(1)
		}
	}()
	query := "!sh " + bin + " probe dns-at=" + pc.LocalAddr().String() + "/outside.example"
	run := func(role string, args ...string) agent.Reply {
		req := agent.Request{AgentID: "a1", Role: role, Message: agent.Message{ID: "m1", Text: query}, LLM: agentspec.LLMConfig{Provider: agentspec.ProviderOffline}}
		rep, code := agentRun(t, bin, t.TempDir(), request(t, req), nil, args...)
		if code != 0 {
			t.Fatalf("exit %d: %+v", code, rep)
		}
		return rep
	}
	rep := run(agentspec.RoleToolExec)
	if n := got.Load(); n == 0 {
		t.Fatalf("control: without --role the tool's query did not arrive (%q)", rep.Reply)
	}
	before := got.Load()
	rep = run(agentspec.RoleToolExec, "--role=tool_exec")
	time.Sleep(300 * time.Millisecond)
	if n := got.Load() - before; n != 0 || !strings.Contains(rep.Reply, "denied") && !strings.Contains(rep.Reply, "not permitted") {
		t.Errorf("--role=tool_exec: %d queries arrived, reply %q; want none, the socket refused", n, rep.Reply)
	}
	rep = run("", "--role=fetch")
	if rep.ErrorKind != agent.ErrKindRequest || len(rep.Steps) != 0 {
		t.Errorf("a request without a role in a FETCH sandbox: %+v, want refused before any step", rep)
	}
}
