package runner

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// Bodies the relay must not forward: streaming in any spelling the
// endpoint could read as stream=true, and server-side tools (web search,
// fetch, code execution) that would give a sandbox without network a way
// out through the model.
func TestRelayRefusesStreamSpellingsAndServerTools(t *testing.T) {
	model := newFakeModel(t)
	r := newRelay(hclog.NewNullLogger(), newMetrics())
	dir := filepath.Join(t.TempDir(), "relay")
	if err := r.Listen(dir); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "relay", r.Close)
	c := relayClient(filepath.Join(dir, RelaySocketName))
	for _, tc := range []struct {
		provider, path, body string
		status               int
	}{
		{agentspec.ProviderOpenAI, "/openai/chat/completions", `{"stream":true,"STREAM":false}`, 400},
		{agentspec.ProviderOpenAI, "/openai/chat/completions", `{"stream":false,"stream":true}`, 400},
		{agentspec.ProviderOpenAI, "/openai/chat/completions", `{"model":"m","web_search_options":{}}`, 400},
		{agentspec.ProviderOpenAI, "/openai/chat/completions", `{"model":"m","tools":[{"type":"web_search"}]}`, 400},
		{agentspec.ProviderOpenAI, "/openai/chat/completions", `{"model":"m","max_tokens":16,"tools":[{"type":"function","function":{"name":"f"}}]}`, 200},
		{agentspec.ProviderAnthropic, "/anthropic/v1/messages", `{"model":"m","tools":[{"type":"web_search_20250305","name":"web_search"}]}`, 400},
		{agentspec.ProviderAnthropic, "/anthropic/v1/messages", `{"model":"m","max_tokens":16,"tools":[{"name":"shell","input_schema":{"type":"object"}}]}`, 200},
		{agentspec.ProviderAnthropic, "/anthropic/v1/messages", `{"model":"m","max_tokens":16,"tools":[{"type":"custom","name":"shell","input_schema":{"type":"object"}}]}`, 200},
	} {
		llm := agentspec.LLMConfig{Provider: tc.provider, Model: "m", BaseURL: model.srv.URL + "/v1", APIKey: "sk-x"}
		if tc.provider == agentspec.ProviderAnthropic {
			llm.BaseURL = model.srv.URL
		}
		tok, end := r.Begin("m1", llm, agentspec.LLMLimits{}, 10*time.Second, Asks{})
		if st, body := relayPost(t, c, tc.path, tok, tc.body); st != tc.status {
			t.Errorf("%s %s: %d %s, want %d", tc.provider, tc.body, st, strings.TrimSpace(body), tc.status)
		}
		end()
	}
}

// What the loop's own SDK clients send, with the LLM settings the runner
// hands them, passes the relay's body check.
func TestRelayPassesTheLoopsOwnBodies(t *testing.T) {
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
		cfg.LLM = agentspec.LLMConfig{Provider: provider, Model: "m"}
		llm := BuildRequest(cfg, "m1", MessageRequest{Text: "hi"}).LLM
		llm.BaseURL, llm.APIKey = base, "k"
		c, err := agent.NewClient(llm, srv.Client())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Complete(context.Background(), agent.Completion{System: "s",
			Messages: []agent.ChatMessage{{Role: agent.RoleUser, Text: "hi"}},
			Tools:    []agent.ToolSpec{{Name: "shell", Description: "d", Parameters: map[string]any{"type": "object", "properties": map[string]any{}}}}})
		srv.Close()
		if len(got) == 0 {
			t.Fatalf("%s: no body", provider)
		}
		if why := relayBodyRefusal(relayPolicy{provider: provider, model: "m", maxTokens: agentspec.DefaultMaxTokensPerCall}, got); why != "" {
			t.Errorf("%s: the loop's own body is refused (%s): %s", provider, why, got)
		}
	}
}
