package runner

import (
	"encoding/base64"
	"encoding/json"
	"errors"
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

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// recordingModel is a model endpoint that records every body that reached
// it (with the key) and answers with answer.
type recordingModel struct {
	mu     sync.Mutex
	bodies []string
	srv    *httptest.Server
}

func newRecordingModel(t *testing.T, answer http.HandlerFunc) *recordingModel {
	m := &recordingModel{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		m.mu.Lock()
		m.bodies = append(m.bodies, string(raw))
		m.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *recordingModel) seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.bodies...)
}

// answerOK answers as an endpoint of either wire format, 11 in and 7 out.
func answerOK(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprint(w, `{"id":"c","choices":[],"content":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"input_tokens":11,"output_tokens":7}}`)
}

// listenRelay is a relay on a socket in a temporary directory, and a
// client of it.
func listenRelay(t *testing.T, log hclog.Logger, m *metrics) (*Relay, *http.Client) {
	r := newRelay(log, m)
	dir := filepath.Join(t.TempDir(), "relay")
	if err := r.Listen(dir); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "relay", r.Close)
	return r, relayClient(filepath.Join(dir, RelaySocketName))
}

func relayPath(provider string) string {
	if provider == agentspec.ProviderAnthropic {
		return "/anthropic/v1/messages"
	}
	return "/openai/chat/completions"
}

// A sandbox holding the relay token (a TOOL-EXEC shell with
// inject_credentials_env) names another model than the agent's, in every
// form the endpoints take: none of those calls reaches the endpoint with
// the key, on either wire format.
func TestRelayForwardsOnlyTheConfiguredModel(t *testing.T) {
	const configured = "gpt-4o-mini"
	for _, provider := range []string{agentspec.ProviderOpenAI, agentspec.ProviderAnthropic} {
		t.Run(provider, func(t *testing.T) {
			model := newRecordingModel(t, answerOK)
			r, c := listenRelay(t, hclog.NewNullLogger(), newMetrics())
			llm := agentspec.LLMConfig{Provider: provider, Model: configured, BaseURL: model.srv.URL, APIKey: "sk-model-swap"}
			tok, end := r.Begin("m1", llm, agentspec.LLMLimits{}, 10*time.Second, Asks{})
			defer end()
			for _, body := range []string{
				`{"model":"gpt-4o-search-preview","max_tokens":16}`,
				`{"model":"openai/gpt-4o:online","max_tokens":16}`,
				`{"model":"gpt-4o-mini:online","max_tokens":16}`,
				`{"model":"GPT-4o-mini","max_tokens":16}`,
				`{"model":"gpt-4o-mini ","max_tokens":16}`,
				`{"model":"gpt-4o-mini","model":"gpt-4o-search-preview","max_tokens":16}`,
				`{"model":"gpt-4o-mini","MODEL":"gpt-4o-search-preview","max_tokens":16}`,
				`{"model":"gpt-4o-mini","Model":["gpt-4o"],"max_tokens":16}`,
				`{"model":"gpt-4o-mini","models":["openai/gpt-4o:online"],"max_tokens":16}`,
				`{"model":"gpt-4o-mini","fallbacks":["gpt-4o-search-preview"],"max_tokens":16}`,
				`{"max_tokens":16}`,
				`{"model":null,"max_tokens":16}`,
			} {
				if st, answer := relayPost(t, c, relayPath(provider), tok, body); st != http.StatusBadRequest {
					t.Errorf("%s: %d %s, want 400", body, st, strings.TrimSpace(answer))
				}
			}
			if got := model.seen(); len(got) != 0 {
				t.Fatalf("the endpoint got, with the key: %q", got)
			}
			// The configured model, also spelled with an escape, passes.
			for _, body := range []string{`{"model":"gpt-4o-mini","max_tokens":16}`, `{"model":"gpt-4o\u002dmini","max_tokens":16}`} {
				if st, answer := relayPost(t, c, relayPath(provider), tok, body); st != http.StatusOK {
					t.Errorf("%s: %d %s, want 200", body, st, answer)
				}
			}
			if got := model.seen(); len(got) != 2 {
				t.Errorf("the endpoint got %d calls, want 2", len(got))
			}
		})
	}
}

// The answer one call may ask for is bounded by llm.max_tokens_per_call,
// in each field the endpoints read, and a call asks for one answer.
func TestRelayBoundsTokensAndChoices(t *testing.T) {
	for _, provider := range []string{agentspec.ProviderOpenAI, agentspec.ProviderAnthropic} {
		t.Run(provider, func(t *testing.T) {
			model := newRecordingModel(t, answerOK)
			r, c := listenRelay(t, hclog.NewNullLogger(), newMetrics())
			llm := agentspec.LLMConfig{Provider: provider, Model: "m", BaseURL: model.srv.URL, APIKey: "sk-fanout"}
			tok, end := r.Begin("m1", llm, agentspec.LLMLimits{MaxTokensPerCall: 100}, 10*time.Second, Asks{})
			defer end()
			for _, tc := range []struct {
				body   string
				status int
			}{
				{`{"model":"m","max_tokens":101}`, 400},
				{`{"model":"m","max_tokens":100000000}`, 400},
				{`{"model":"m","max_completion_tokens":101}`, 400},
				{`{"model":"m","max_output_tokens":101}`, 400},
				{`{"model":"m","max_tokens":100,"MAX_TOKENS":101}`, 400},
				{`{"model":"m","max_tokens":100,"max_completion_tokens":101}`, 400},
				{`{"model":"m","max_tokens":1e9}`, 400},
				{`{"model":"m","max_tokens":"50"}`, 400},
				{`{"model":"m","max_tokens":0}`, 400},
				{`{"model":"m","max_tokens":null}`, 400},
				{`{"model":"m"}`, 400},
				{`{"model":"m","max_tokens":100,"n":2}`, 400},
				{`{"model":"m","max_tokens":100,"N":8}`, 400},
				{`{"model":"m","max_tokens":100,"best_of":3}`, 400},
				{`{"model":"m","max_tokens":100,"n":1}`, 200},
				{`{"model":"m","max_completion_tokens":100}`, 200},
			} {
				if st, answer := relayPost(t, c, relayPath(provider), tok, tc.body); st != tc.status {
					t.Errorf("%s: %d %s, want %d", tc.body, st, strings.TrimSpace(answer), tc.status)
				}
			}
			if got := model.seen(); len(got) != 2 {
				t.Errorf("the endpoint got %q, want only the two bounded calls", got)
			}
		})
	}
}

// An endpoint that answers an error with the key in its body, literal,
// \u-escaped or base64, hands the sandbox none of it: the status and the
// relay's own words. The runner's log does not get the body either.
func TestRelayErrorBodiesAreTheRelays(t *testing.T) {
	const key = "sk-echo-4f2a9c1be07d"
	forms := map[string]string{
		"literal":   key,
		"u-escaped": strings.NewReplacer("s", `\u0073`, "k", `\u006b`, "-", `\u002d`).Replace(key),
		"base64":    base64.StdEncoding.EncodeToString([]byte("Bearer " + key)),
		"hex":       fmt.Sprintf("%x", key),
	}
	for _, provider := range []string{agentspec.ProviderOpenAI, agentspec.ProviderAnthropic} {
		for form, echoed := range forms {
			t.Run(provider+"/"+form, func(t *testing.T) {
				model := newRecordingModel(t, func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusUnauthorized)
					_, _ = fmt.Fprintf(w, `{"error":{"type":"invalid_key","message":"bad key %s"}}`, echoed)
				})
				logs := &syncBuffer{}
				r, c := listenRelay(t, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace}), newMetrics())
				llm := agentspec.LLMConfig{Provider: provider, Model: "m", BaseURL: model.srv.URL, APIKey: key}
				tok, end := r.Begin("m1", llm, agentspec.LLMLimits{}, 10*time.Second, Asks{})
				st, body := relayPost(t, c, relayPath(provider), tok, okBody)
				end()
				if len(model.seen()) != 1 {
					t.Fatalf("the call did not reach the endpoint: %d %s", st, body)
				}
				var e struct {
					Error struct{ Type, Message string }
				}
				if st != http.StatusUnauthorized || json.Unmarshal([]byte(body), &e) != nil || e.Error.Type != "meepa_relay" ||
					!strings.Contains(e.Error.Message, "401") {
					t.Errorf("sandbox got %d %s, want 401 and the relay's own error", st, body)
				}
				for where, text := range map[string]string{"answer": body, "log": string(logs.Bytes())} {
					if strings.Contains(text, echoed) || strings.Contains(text, key) || strings.Contains(text, "bad key") {
						t.Errorf("the %s carries the endpoint's body (%s form):\n%s", where, form, text)
					}
				}
			})
		}
	}
}

// The budgets: the call that crosses llm.message_token_budget is answered
// and the message's next one refused; llm.agent_token_budget likewise over
// the messages of a window. /metrics counts both.
func TestRelayTokenBudgets(t *testing.T) {
	model := newRecordingModel(t, answerOK) // 18 tokens a call
	m := newMetrics()
	r, c := listenRelay(t, hclog.NewNullLogger(), m)
	llm := agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "m", BaseURL: model.srv.URL, APIKey: "sk-budget"}
	limits := agentspec.LLMLimits{MaxTokensPerCall: 16, MessageTokenBudget: 30, AgentTokenBudget: 50}
	calls := func(tok string, n int) []int {
		var got []int
		for range n {
			st, _ := relayPost(t, c, "/openai/chat/completions", tok, okBody)
			got = append(got, st)
		}
		return got
	}
	tok, end := r.Begin("m1", llm, limits, 10*time.Second, Asks{})
	// 0 → 18 → 36 (crossed 30) → refused.
	if got := calls(tok, 3); fmt.Sprint(got) != "[200 200 403]" {
		t.Errorf("one message's calls: %v, want [200 200 403]", got)
	}
	u := end()
	if u.BudgetRefused != "message" || u.InputTokens+u.OutputTokens != 36 || u.AgentWindowTokens != 36 {
		t.Errorf("first message's usage %+v", u)
	}
	// A new message has its own budget, the agent's is shared: 36 → 54
	// (crossed 50) → refused.
	tok, end = r.Begin("m2", llm, limits, 10*time.Second, Asks{})
	if got := calls(tok, 2); fmt.Sprint(got) != "[200 403]" {
		t.Errorf("second message's calls: %v, want [200 403]", got)
	}
	if u := end(); u.BudgetRefused != "agent" || u.AgentWindowTokens != 54 {
		t.Errorf("second message's usage %+v", u)
	}
	if n := len(model.seen()); n != 3 {
		t.Errorf("the endpoint got %d calls, want 3", n)
	}
	var sb strings.Builder
	testutil.Must(t, m.write(&sb, gauges{}))
	for _, want := range []string{
		`meepa_runner_llm_budget_refusals_total{budget="message"} 1`,
		`meepa_runner_llm_budget_refusals_total{budget="agent"} 1`,
		`meepa_runner_llm_agent_window_tokens 54`,
	} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, sb.String())
		}
	}
}

// The agent's window survives a restart: a new runner on the same journal
// directory goes on refusing, and the audit line says which budget refused
// and the window's count. Once the window is over, calls pass again.
func TestAgentBudgetSurvivesRestart(t *testing.T) {
	model := newRecordingModel(t, answerOK)
	journal := filepath.Join(t.TempDir(), "journal")
	cfg := testConfig()
	cfg.RelayDir = filepath.Join(t.TempDir(), "relay")
	cfg.Journal = journal
	cfg.LLM = agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "m", BaseURL: model.srv.URL, APIKey: "sk-restart"}
	cfg.LLMLimits = agentspec.LLMLimits{MaxTokensPerCall: 16, MessageTokenBudget: 20, AgentTokenBudget: 30, AgentBudgetWindowSeconds: 3600}
	var statuses []int
	b := &scripted{answer: func(req agent.Request) (sandbox.Outcome, error) {
		for range 2 {
			st, _ := relayPost(t, relayClient(filepath.Join(cfg.RelayDir, RelaySocketName)), "/openai/chat/completions", req.LLM.APIKey, okBody)
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
	if n := len(model.seen()); n != 2 {
		t.Errorf("the endpoint got %d calls, want 2", n)
	}
	// The journal leaves the budget's record alone.
	if _, err := os.Stat(filepath.Join(journal, budgetFileName)); err != nil {
		t.Error(err)
	}

	// A window that is over starts again.
	bud, err := openAgentBudget(journal)
	if err != nil {
		t.Fatal(err)
	}
	bud.now = func() time.Time { return time.Now().Add(time.Hour) }
	if n := bud.used(time.Hour); n != 0 {
		t.Errorf("after the window: %d tokens counted, want 0", n)
	}
}

// A budget out of range, or below the one it contains, is refused by the
// same check the provider runs at plan.
func TestValidateLLMLimits(t *testing.T) {
	for _, tc := range []struct {
		limits agentspec.LLMLimits
		field  string
	}{
		{agentspec.LLMLimits{MaxTokensPerCall: -1}, "llm.max_tokens_per_call"},
		{agentspec.LLMLimits{MaxTokensPerCall: agentspec.MaxMaxTokensPerCall + 1}, "llm.max_tokens_per_call"},
		{agentspec.LLMLimits{MessageTokenBudget: -5}, "llm.message_token_budget"},
		{agentspec.LLMLimits{MessageTokenBudget: 100}, "llm.message_token_budget"}, // below the default per-call cap
		{agentspec.LLMLimits{AgentTokenBudget: 1000}, "llm.agent_token_budget"},    // below the default message budget
		{agentspec.LLMLimits{AgentBudgetWindowSeconds: 59}, "llm.agent_budget_window_seconds"},
	} {
		c := testConfig()
		c.LLMLimits = tc.limits
		err := agentspec.ValidateSettings(c)
		var fe *agentspec.FieldError
		if err == nil || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want an error on %s", tc.limits, err, tc.field)
		}
	}
	c := testConfig()
	c.LLMLimits = agentspec.LLMLimits{MaxTokensPerCall: 100, MessageTokenBudget: 100, AgentTokenBudget: 100, AgentBudgetWindowSeconds: 60}
	if err := agentspec.ValidateSettings(c); err != nil {
		t.Errorf("tight but coherent limits refused: %v", err)
	}
}
