package relay

import (
	"encoding/base64"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestRelayScrub: the scrub route hands a live message's caller its text
// with every whole spelling of the key replaced, and nothing else: a
// prefix, all but the last character, or the key with one character
// wrong come back as sent, so the answer does not grow with what a caller
// guessed right. A dead token, an oversize text and a message past its
// caps are refused.
func TestRelayScrub(t *testing.T) {
	const key = "sk-scrub-3b7e19a0c4d2"
	r := New(hclog.NewNullLogger(), &counts{}, nil)
	dir := filepath.Join(t.TempDir(), "relay")
	testutil.Must(t, r.Listen(dir))
	testutil.Cleanup(t, "relay", r.Close)
	c := testutil.RelayClient(filepath.Join(dir, SocketName))
	llm := agentspec.LLMConfig{Provider: agentspec.ProviderOffline, APIKey: key}
	token, end := r.Begin("msg-scrub", llm, agentspec.LLMLimits{}, 10*time.Second, Asks{})

	for _, text := range []string{
		"the key: " + key,
		"b64 " + base64.StdEncoding.EncodeToString([]byte(key)),
		"spaced " + strings.Join(strings.Split(key, ""), " "),
	} {
		st, got := testutil.RelayPost(t, c, agent.ScrubPath, token, text)
		if st != http.StatusOK || strings.Contains(got, key) || !strings.Contains(got, redact.Redacted) {
			t.Errorf("scrub %q: %d %q", text, st, got)
		}
	}
	for _, text := range []string{key[:len(key)-1], key[1:], key[:10], strings.Replace(key, "3b7e", "3b7f", 1), "ordinary text"} {
		if st, got := testutil.RelayPost(t, c, agent.ScrubPath, token, text); st != http.StatusOK || got != text {
			t.Errorf("scrub %q: %d %q, want it back as sent", text, st, got)
		}
	}
	if st, _ := testutil.RelayPost(t, c, agent.ScrubPath, token, strings.Repeat("x", agent.MaxScrubBytes+1)); st != http.StatusRequestEntityTooLarge {
		t.Errorf("oversize text: %d, want 413", st)
	}
	c = testutil.RelayClient(filepath.Join(dir, SocketName)) // the refusal closed the connection
	n := 0
	for ; n < maxScrubCallsPerMessage+1; n++ {
		if st, _ := testutil.RelayPost(t, c, agent.ScrubPath, token, "x"); st != http.StatusOK {
			if st != http.StatusForbidden {
				t.Errorf("past the cap: %d, want 403", st)
			}
			break
		}
	}
	if n >= maxScrubCallsPerMessage {
		t.Errorf("%d scrubs answered in one message, the cap is %d", n+8, maxScrubCallsPerMessage)
	}
	end()
	c = testutil.RelayClient(filepath.Join(dir, SocketName))
	if st, got := testutil.RelayPost(t, c, agent.ScrubPath, token, key); st != http.StatusUnauthorized || strings.Contains(got, key) {
		t.Errorf("dead token: %d %q", st, got)
	}
}
