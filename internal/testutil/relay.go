package testutil

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// RelayClient is an HTTP client whose every connection goes to the unix
// socket sock (an LLM relay's).
func RelayClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// RelayPost posts body to path through c with auth as the bearer token
// (none when empty) and returns the status and the body read in full.
func RelayPost(t testing.TB, c *http.Client, path, auth, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://meepa-relay"+path, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}
