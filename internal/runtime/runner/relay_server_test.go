package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/relay"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner/backends"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
	"github.com/hashicorp/go-hclog"
)

// Tests of the runner's use of its LLM relay (internal/runtime/relay holds
// the relay's own).

// fakeModel is an OpenAI-compatible endpoint on loopback that records
// the credential of each call and answers 11 tokens in and 7 out.
type fakeModel struct {
	mu   sync.Mutex
	auth []string
	srv  *httptest.Server
}

func newFakeModel(t *testing.T) *fakeModel {
	f := &fakeModel{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprint(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7}}`)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeModel) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.auth...)
}

// okBody is a model call the relay forwards for model "m" under the
// default limits.
const okBody = `{"model":"m","max_tokens":16}`

// The runner hands the loop a relay token and socket, never the key; the
// token works for that message's calls only, and the audit line and
// /metrics count the tokens.
func TestRunnerRequestCarriesRelayNotKey(t *testing.T) {
	model := newFakeModel(t)
	cfg := testConfig()
	cfg.RelayDir = filepath.Join(t.TempDir(), "relay")
	cfg.LLM = agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "m", BaseURL: model.srv.URL + "/v1", APIKey: "sk-very-secret"}
	var during int
	b := &scripted{answer: func(req agent.Request) (sandbox.Outcome, error) {
		// What a per-message container does: call the relay through the
		// socket in the mounted directory (here, the host path).
		during, _ = testutil.RelayPost(t, testutil.RelayClient(filepath.Join(cfg.RelayDir, relay.SocketName)), "/openai/chat/completions", req.LLM.APIKey, okBody)
		return replyOutcome(agent.Reply{MessageID: req.Message.ID, Reply: "ok"})
	}}
	_, ts := newTestServer(t, cfg, b)
	if code, m := post(t, ts.URL, "tok-123", `{"text":"hi"}`); code != 200 {
		t.Fatalf("status %d: %v", code, m)
	}
	req := b.jobs[0]
	if req.LLM.APIKey == "" || strings.Contains(req.LLM.APIKey, "sk-very-secret") || req.LLM.BaseURL != "http://meepa-relay/openai/" ||
		req.Relay == nil || req.Relay.Socket != "/run/meepa/"+relay.SocketName {
		t.Errorf("request LLM %+v relay %+v", req.LLM, req.Relay)
	}
	raw, _ := json.Marshal(req)
	if strings.Contains(string(raw), "sk-very-secret") {
		t.Errorf("the key is in the stdin request: %s", raw)
	}
	if during != 200 {
		t.Errorf("relay call during the message: %d", during)
	}
	if st, _ := testutil.RelayPost(t, testutil.RelayClient(filepath.Join(cfg.RelayDir, relay.SocketName)), "/openai/chat/completions", req.LLM.APIKey, `{}`); st != 401 {
		t.Errorf("the message's token after it ended: %d, want 401", st)
	}
	if auth := model.seen(); len(auth) != 1 || auth[0] != "Bearer sk-very-secret" {
		t.Errorf("endpoint auth %q", auth)
	}
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metricsText, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close() // read in full
	if !strings.Contains(string(metricsText), `meepa_runner_llm_tokens_total{direction="output"} 7`) {
		t.Errorf("metrics:\n%s", metricsText)
	}
}

// The relay directory is mounted only where it is used, and a TOOL-EXEC
// agent's sandbox has no network whatever its config names; in host mode
// its child gets no TCP.
func TestSandboxOptionsFollowRoleAndRelay(t *testing.T) {
	cfg := testConfig()
	cfg.Container.Networks = []string{"tg-llmnet"}
	if o := backends.DockerOptions(cfg, nil); o.Spec.RelayDir != backends.RelayDir(cfg) || len(o.Spec.Networks) != 1 {
		t.Errorf("offline agent with a key (the relay scrubs its writes): relay dir %q, networks %v", o.Spec.RelayDir, o.Spec.Networks)
	}
	cfg.LLM.APIKey = ""
	if o := backends.DockerOptions(cfg, nil); o.Spec.RelayDir != "" || len(o.Spec.Networks) != 1 {
		t.Errorf("offline agent without a key: relay dir %q, networks %v", o.Spec.RelayDir, o.Spec.Networks)
	}
	cfg.LLM.APIKey = "sk-very-secret"
	cfg.LLM.Provider = agentspec.ProviderOpenAI
	if o := backends.DockerOptions(cfg, nil); o.Spec.RelayDir != backends.RelayDir(cfg) {
		t.Errorf("openai agent: relay dir %q", o.Spec.RelayDir)
	}
	cfg.Role = agentspec.RoleToolExec
	if o := backends.DockerOptions(cfg, nil); o.Spec.Network != "none" || o.Spec.Networks != nil {
		t.Errorf("tool_exec: network %q %v, want none", o.Spec.Network, o.Spec.Networks)
	}
	cfg.FileAccess.AllowNetwork = true
	if o := backends.HostOptions(cfg, nil); o.FileAccess.AllowNetwork {
		t.Error("tool_exec in host mode keeps TCP")
	}
	for _, bad := range []func(c *agentspec.Config){
		func(c *agentspec.Config) { c.Role = "admin" },
		func(c *agentspec.Config) {
			c.Role = "fetch"
			c.Ask = []agentspec.AskTarget{{AgentID: "x", Role: "tool_exec", Listen: "unix:///s", Token: "t"}}
		},
		func(c *agentspec.Config) {
			c.Role = "core"
			c.Ask = []agentspec.AskTarget{{AgentID: "x", Role: "core", Listen: "unix:///s", Token: "t"}}
		},
		func(c *agentspec.Config) {
			c.Role = "core"
			c.Ask = []agentspec.AskTarget{{AgentID: "x", Role: "fetch", Listen: "10.0.0.1:80", Token: "t"}}
		},
		func(c *agentspec.Config) {
			// A port is a cluster target's; on Docker the listen decides.
			c.Role = "core"
			c.Ask = []agentspec.AskTarget{{AgentID: "x", Role: "fetch", Listen: "unix:///s", Port: 8080, Token: "t"}}
		},
		func(c *agentspec.Config) {
			c.Role = "tool_exec"
			c.Container.Enabled = false
			c.FileAccess.Unrestricted = true
		},
	} {
		c := testConfig()
		bad(c)
		if err := kube.ValidateConfig(c); err == nil {
			t.Errorf("config accepted: role %q ask %+v", c.Role, c.Ask)
		}
	}
}

// The agent's window survives a restart: a new runner on the same journal
// directory goes on refusing, and the audit line says which budget refused
// and the window's count. (That a window which is over starts again is relay's
// TestBudgetWindowEnds.)
func TestAgentBudgetSurvivesRestart(t *testing.T) {
	model := newFakeModel(t)
	journal := filepath.Join(t.TempDir(), "journal")
	cfg := testConfig()
	cfg.RelayDir = filepath.Join(t.TempDir(), "relay")
	cfg.Journal = journal
	cfg.LLM = agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "m", BaseURL: model.srv.URL, APIKey: "sk-restart"}
	cfg.LLMLimits = agentspec.LLMLimits{MaxTokensPerCall: 16, MessageTokenBudget: 20, AgentTokenBudget: 30, AgentBudgetWindowSeconds: 3600}
	var statuses []int
	b := &scripted{answer: func(req agent.Request) (sandbox.Outcome, error) {
		for range 2 {
			st, _ := testutil.RelayPost(t, testutil.RelayClient(filepath.Join(cfg.RelayDir, relay.SocketName)), "/openai/chat/completions", req.LLM.APIKey, okBody)
			statuses = append(statuses, st)
		}
		return replyOutcome(agent.Reply{MessageID: req.Message.ID, Reply: "ok"})
	}}
	start := func() (*Server, *httptest.Server, *syncBuffer) {
		logs := &syncBuffer{}
		s, err := New(t.Context(), cfg, Options{
			Logger:     hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}),
			NewBackend: scriptedBackend(b),
		})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(s.handler())
		t.Cleanup(ts.Close)
		return s, ts, logs
	}
	s, ts, logs := start()
	if code, m := post(t, ts.URL, "tok-123", `{"text":"hi"}`); code != 200 {
		t.Fatalf("status %d: %v", code, m)
	}
	// 18 → 36: the second call crossed the message's 20 and the agent's 30.
	if fmt.Sprint(statuses) != "[200 200]" || !strings.Contains(string(logs.Bytes()), "llm_agent_window_tokens=36") {
		t.Errorf("first runner: calls %v, log:\n%s", statuses, logs.Bytes())
	}
	ts.Close()
	testutil.Must(t, s.Shutdown(t.Context()))

	statuses = nil
	_, ts, logs = start()
	if code, m := post(t, ts.URL, "tok-123", `{"text":"hi"}`); code != 200 {
		t.Fatalf("status %d: %v", code, m)
	}
	if fmt.Sprint(statuses) != "[403 403]" {
		t.Errorf("after a restart: calls %v, want both refused by the agent budget", statuses)
	}
	if l := string(logs.Bytes()); !strings.Contains(l, "llm_budget_refused=agent") || !strings.Contains(l, "llm_agent_window_tokens=36") {
		t.Errorf("the audit line lacks the budget:\n%s", l)
	}
	if auth := model.seen(); len(auth) != 2 {
		t.Errorf("the endpoint got %d calls, want 2", len(auth))
	}
	// The journal leaves the budget's record alone.
	if _, err := os.Stat(filepath.Join(journal, relay.BudgetFileName)); err != nil {
		t.Error(err)
	}
}

// What the loop's own SDK clients send, with the LLM settings the runner
// hands them, passes the relay's body check: sent through a relay, it
// reaches the endpoint.
func TestRelayPassesTheLoopsOwnBodies(t *testing.T) {
	rl := relay.New(hclog.NewNullLogger(), newMetrics(), nil)
	dir := filepath.Join(t.TempDir(), "relay")
	if err := rl.Listen(dir); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "relay", rl.Close)
	for _, provider := range []string{agentspec.ProviderOpenAI, agentspec.ProviderAnthropic} {
		var got []byte
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got, _ = io.ReadAll(r.Body)
			w.WriteHeader(http.StatusBadRequest) // the body is all the test wants
		}))
		base := srv.URL + "/v1"
		if provider == agentspec.ProviderAnthropic {
			base = srv.URL
		}
		cfg := testConfig()
		cfg.LLM = agentspec.LLMConfig{Provider: provider, Model: "m", BaseURL: base, APIKey: "k"}
		llm := BuildRequest(cfg, "m1", MessageRequest{Text: "hi"}).LLM
		tok, end := rl.Begin("m1", cfg.LLM, cfg.LLMLimits, 10*time.Second, relay.Asks{})
		llm.BaseURL, llm.APIKey = relay.BaseURL(provider), tok
		c, err := agent.NewClient(llm, testutil.RelayClient(filepath.Join(dir, relay.SocketName)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Complete(context.Background(), agent.Completion{System: "s",
			Messages: []agent.ChatMessage{{Role: agent.RoleUser, Text: "hi"}},
			Tools:    []agent.ToolSpec{{Name: "shell", Description: "d", Parameters: map[string]any{"type": "object", "properties": map[string]any{}}}}})
		end()
		srv.Close()
		if len(got) == 0 {
			t.Errorf("%s: the loop's own body did not reach the endpoint: %v", provider, err)
		}
	}
}
