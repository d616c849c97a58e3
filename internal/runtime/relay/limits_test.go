package relay

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
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
func listenRelay(t *testing.T, log hclog.Logger, m Metrics) (*Relay, *http.Client) {
	r := New(log, m, nil)
	dir := filepath.Join(t.TempDir(), "relay")
	if err := r.Listen(dir); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "relay", r.Close)
	return r, testutil.RelayClient(filepath.Join(dir, SocketName))
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
			r, c := listenRelay(t, hclog.NewNullLogger(), &counts{})
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
				if st, answer := testutil.RelayPost(t, c, relayPath(provider), tok, body); st != http.StatusBadRequest {
					t.Errorf("%s: %d %s, want 400", body, st, strings.TrimSpace(answer))
				}
			}
			if got := model.seen(); len(got) != 0 {
				t.Fatalf("the endpoint got, with the key: %q", got)
			}
			// The configured model, also spelled with an escape, passes.
			for _, body := range []string{`{"model":"gpt-4o-mini","max_tokens":16}`, `{"model":"gpt-4o\u002dmini","max_tokens":16}`} {
				if st, answer := testutil.RelayPost(t, c, relayPath(provider), tok, body); st != http.StatusOK {
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
			r, c := listenRelay(t, hclog.NewNullLogger(), &counts{})
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
				if st, answer := testutil.RelayPost(t, c, relayPath(provider), tok, tc.body); st != tc.status {
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
				r, c := listenRelay(t, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace}), &counts{})
				llm := agentspec.LLMConfig{Provider: provider, Model: "m", BaseURL: model.srv.URL, APIKey: key}
				tok, end := r.Begin("m1", llm, agentspec.LLMLimits{}, 10*time.Second, Asks{})
				st, body := testutil.RelayPost(t, c, relayPath(provider), tok, okBody)
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
	m := &counts{}
	r, c := listenRelay(t, hclog.NewNullLogger(), m)
	llm := agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "m", BaseURL: model.srv.URL, APIKey: "sk-budget"}
	limits := agentspec.LLMLimits{MaxTokensPerCall: 16, MessageTokenBudget: 30, AgentTokenBudget: 50}
	calls := func(tok string, n int) []int {
		var got []int
		for range n {
			st, _ := testutil.RelayPost(t, c, "/openai/chat/completions", tok, okBody)
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
	if m.refused["message"] != 1 || m.refused["agent"] != 1 || m.window != 54 {
		t.Errorf("metrics: budget refusals %v, window %d; want one of each and 54", m.refused, m.window)
	}
}

// A window that is over starts again.
func TestBudgetWindowEnds(t *testing.T) {
	dir := t.TempDir()
	bud, err := OpenBudget(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bud.add(36, time.Hour); err != nil {
		t.Fatal(err)
	}
	if bud, err = OpenBudget(dir); err != nil {
		t.Fatal(err)
	}
	if n := bud.used(time.Hour); n != 36 {
		t.Errorf("reopened: %d tokens counted, want 36", n)
	}
	bud.now = func() time.Time { return time.Now().Add(time.Hour) }
	if n := bud.used(time.Hour); n != 0 {
		t.Errorf("after the window: %d tokens counted, want 0", n)
	}
}
