package proxy

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// A runner's requests to the proxy itself, about one of its messages, each
// authorized by that message's credential: Register before the message,
// Revoke after it, AgentCA whenever its sandbox needs the CA.

// selfTimeout bounds one such request.
const selfTimeout = 5 * time.Second

// Self is a runner's handle on one message at its topology's proxy.
type Self struct {
	// Proxy is the proxy's URL without userinfo ("http://10.0.0.2:3128").
	Proxy      string
	Agent      string
	Credential string
}

func (m Self) do(ctx context.Context, method, path string, body []byte, want int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, selfTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(m.Proxy, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(m.Agent+":"+m.Credential)))
	// Straight to the proxy: no environment proxy applies.
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }() // read below
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("proxy answered %s: %s", resp.Status, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// Register gives the proxy the message's bindings, sealed under the
// agent's key.
func (m Self) Register(ctx context.Context, agentKey []byte, message string, binds []Binding) error {
	sealed, err := Seal(agentKey, message, binds)
	if err != nil {
		return fmt.Errorf("egress bind: %w", err)
	}
	if _, err := m.do(ctx, http.MethodPost, BindPath, sealed, http.StatusNoContent); err != nil {
		return fmt.Errorf("egress bind: %w", err)
	}
	return nil
}

// AgentCA is the PEM of the agent's CA.
func (m Self) AgentCA(ctx context.Context) ([]byte, error) {
	out, err := m.do(ctx, http.MethodGet, CAPath, nil, http.StatusOK)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	return out, nil
}

// Revoke ends the message's credential (and its bindings) and returns its
// egress counts as the proxy kept them.
func (m Self) Revoke(ctx context.Context) (Counts, error) {
	out, err := m.do(ctx, http.MethodPost, RevokePath, nil, http.StatusOK)
	if err != nil {
		return Counts{}, fmt.Errorf("egress revoke: %w", err)
	}
	var n Counts
	if err := json.Unmarshal(out, &n); err != nil {
		return Counts{}, fmt.Errorf("egress revoke: %w", err)
	}
	return n, nil
}
