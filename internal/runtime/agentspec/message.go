package agentspec

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// MessageReply is what a runner answers to one message (POST
// /v1/messages), as far as the agent's owner reads it.
type MessageReply struct {
	MessageID  string `json:"message_id"`
	Reply      string `json:"reply"`
	DurationMS int64  `json:"duration_ms"`
	// ErrorKind and Error are set on a reply the loop gave up on
	// (llm_error, max_steps, ...), or on a refused message with the
	// status's kind (timeout, oom, sandbox_error, ...).
	ErrorKind string `json:"error_kind,omitempty"`
	Error     string `json:"error,omitempty"`
	// Status is the HTTP status the runner answered with.
	Status int `json:"-"`
}

// Failed says whether the message got no good reply.
func (r MessageReply) Failed() bool { return r.Status != http.StatusOK || r.ErrorKind != "" }

// maxReplyBytes bounds what PostMessage reads of a runner's answer.
const maxReplyBytes = 4 << 20

// PostMessage sends text to the runner at base (its HTTP root) through hc,
// with the agent's bearer token, and reads the answer: a reply, or the
// runner's error body with its status. An error only when no answer came.
func PostMessage(ctx context.Context, hc *http.Client, base, token, text string) (MessageReply, error) {
	var r MessageReply
	body, _ := json.Marshal(map[string]string{"text": text}) // a map of strings always marshals
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return r, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return r, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
	if err != nil {
		return r, fmt.Errorf("reading the runner's answer: %w", err)
	}
	r.Status = resp.StatusCode
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &r); err != nil {
			return r, fmt.Errorf("the runner's reply is not JSON: %w", err)
		}
		return r, nil
	}
	var e struct {
		Error struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		} `json:"error"`
		MessageID string `json:"message_id"`
	}
	if json.Unmarshal(raw, &e) != nil || e.Error.Kind == "" {
		r.ErrorKind, r.Error = "http", fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(raw)))
		return r, nil
	}
	r.MessageID, r.ErrorKind, r.Error = e.MessageID, e.Error.Kind, e.Error.Message
	return r, nil
}
