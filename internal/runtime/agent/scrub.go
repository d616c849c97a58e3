package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
)

// ScrubPath is the relay's route that hands back a text with every
// spelling of the agent's llm.api_key replaced.
const ScrubPath = "/scrub"

// MaxScrubBytes bounds one text the relay scrubs; the same bound as a
// request, so that any message text and any model answer fit.
const MaxScrubBytes = MaxRequestBytes

// scrubTimeout bounds one scrub call: it is a linear scan on the runner.
const scrubTimeout = 30 * time.Second

// scrubber is what every write of the loop into the workspace passes
// through (Prepared.Scrub). It knows two sets of values:
//
//   - those the loop holds (the secrets, and the key when it came without
//     a relay), matched here by red;
//   - the real llm.api_key, which by design never enters the sandbox's
//     process tree: only the runner's relay knows it, so remote asks the
//     relay to match it (ScrubPath).
//
// Why a route on the relay rather than salted fingerprints of the key's
// spellings handed to the loop: fingerprints inside the sandbox are an
// offline guessing target with no bound on the guesses (a short or
// patterned key falls), and matching them needs a second matcher beside
// the Redactor, one hash per window length per position. The route keeps
// one matcher, the one that already cleans the reply, and what it tells
// a caller is bounded: see Relay.serveScrub in package runner.
//
// It fails closed: a text the relay cannot scrub (no answer, a refusal, a
// text over MaxScrubBytes) is not written, and the write reports why.
type scrubber struct {
	red    *redact.Redactor
	remote func(ctx context.Context, text string) (string, error)
}

// String returns text as it may be written into the workspace.
func (s *scrubber) String(ctx context.Context, text string) (string, error) {
	if s == nil {
		return text, nil
	}
	text = s.red.String(text)
	if s.remote == nil || text == "" {
		return text, nil
	}
	out, err := s.remote(ctx, text)
	if err != nil {
		return "", fmt.Errorf("not written: the runner could not scrub it of the API key (%w)", err)
	}
	return out, nil
}

// relayScrub asks the relay at tr, with this message's token, to scrub a
// text of the real key.
func relayScrub(tr http.RoundTripper, token string) func(ctx context.Context, text string) (string, error) {
	c := &http.Client{Transport: tr, Timeout: scrubTimeout}
	return func(ctx context.Context, text string) (string, error) {
		if len(text) > MaxScrubBytes {
			return "", fmt.Errorf("%d bytes, more than the %d the relay scrubs", len(text), MaxScrubBytes)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://meepa-relay"+ScrubPath, bytes.NewReader([]byte(text)))
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "text/plain; charset=utf-8")
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer func() { _ = resp.Body.Close() }() // read-only
		// Every replacement is at most len(Redacted) for MinSecretLen bytes.
		limit := int64(len(text))*int64(len(redact.Redacted))/redact.MinSecretLen + 1
		raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
		switch {
		case err != nil:
			return "", err
		case resp.StatusCode != http.StatusOK:
			var e struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			_ = json.Unmarshal(raw, &e) // a body that is not the relay's says nothing more
			return "", fmt.Errorf("relay answered %d %s", resp.StatusCode, bounded(e.Error.Message, 200))
		case int64(len(raw)) > limit:
			return "", errors.New("the relay's answer is longer than a scrub can make it")
		}
		return string(raw), nil
	}
}
