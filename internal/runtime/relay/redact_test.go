package relay

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestRelayRedactsEncodedKey: an endpoint that echoes the key it was sent,
// base64-encoded, in hex and \u-escaped in a 200 answer's content, or
// \u-escaped and base64 in a 401's error, hands the sandbox none of it,
// and the 200 answer stays the endpoint's JSON.
func TestRelayRedactsEncodedKey(t *testing.T) {
	const key = "sk-relay-echo-9f8e7d6c5b4a"
	b64 := base64.StdEncoding.EncodeToString([]byte(key))
	var escaped strings.Builder
	for _, c := range []byte(key) {
		fmt.Fprintf(&escaped, `\u%04x`, c)
	}
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		if in, _ := io.ReadAll(r.Body); strings.Contains(string(in), "ECHO-401") {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = fmt.Fprintf(w, `{"error":{"message":"bad key %s (%s)"}}`, escaped.String(), b64)
			return
		}
		content := fmt.Sprintf("here it is: %s and %s and %s", b64, hex.EncodeToString([]byte(key)), escaped.String())
		_, _ = fmt.Fprintf(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`, content)
	}))
	t.Cleanup(model.Close)

	r := New(hclog.NewNullLogger(), &counts{}, nil)
	dir := filepath.Join(t.TempDir(), "relay")
	if err := r.Listen(dir); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "relay", r.Close)
	c := testutil.RelayClient(filepath.Join(dir, SocketName))
	llm := agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "m", BaseURL: model.URL + "/v1/", APIKey: key}
	token, end := r.Begin("msg-echo", llm, agentspec.LLMLimits{}, 10*time.Second, Asks{})
	defer end()

	st, body := testutil.RelayPost(t, c, "/openai/chat/completions", token, `{"model":"m","max_tokens":10}`)
	if st != http.StatusOK {
		t.Fatalf("relayed call: %d %s", st, body)
	}
	for name, form := range map[string]string{"base64": b64, "hex": hex.EncodeToString([]byte(key)), `\u-escaped`: escaped.String(), "literal": key} {
		if strings.Contains(body, form) || strings.Contains(body, strings.ReplaceAll(form, `\`, `\\`)) {
			t.Errorf("the 200 answer hands the sandbox the %s key: %s", name, body)
		}
	}
	// A refusal that echoes it (whether the relay passes the endpoint's
	// error body or makes its own) carries none of it either.
	st, refused := testutil.RelayPost(t, c, "/openai/chat/completions", token, `{"model":"m","max_tokens":10,"q":"ECHO-401"}`)
	if st != http.StatusUnauthorized {
		t.Errorf("echoing refusal: %d %s, want 401", st, refused)
	}
	for name, form := range map[string]string{"base64": b64, `\u-escaped`: escaped.String(), "literal": key} {
		if strings.Contains(refused, form) {
			t.Errorf("the 401 hands the sandbox the %s key: %s", name, refused)
		}
	}
	var ans struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(body), &ans); err != nil || len(ans.Choices) != 1 {
		t.Fatalf("the redacted answer is no longer the endpoint's JSON: %v %s", err, body)
	}
	if got, want := ans.Choices[0].Message.Content, "here it is: "+redact.Redacted+" and "+redact.Redacted+" and "+redact.Redacted; got != want {
		t.Errorf("content = %q, want %q", got, want)
	}
}
