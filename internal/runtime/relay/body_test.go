package relay

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// Bodies the relay must not forward: streaming in any spelling the
// endpoint could read as stream=true, and server-side tools (web search,
// fetch, code execution) that would give a sandbox without network a way
// out through the model.
func TestRelayRefusesStreamSpellingsAndServerTools(t *testing.T) {
	model := newFakeModel(t)
	r := New(hclog.NewNullLogger(), &counts{}, nil)
	dir := filepath.Join(t.TempDir(), "relay")
	if err := r.Listen(dir); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "relay", r.Close)
	c := testutil.RelayClient(filepath.Join(dir, SocketName))
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
		if st, body := testutil.RelayPost(t, c, tc.path, tok, tc.body); st != tc.status {
			t.Errorf("%s %s: %d %s, want %d", tc.provider, tc.body, st, strings.TrimSpace(body), tc.status)
		}
		end()
	}
}
