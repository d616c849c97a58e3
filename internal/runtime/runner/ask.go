package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/relay"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// Gated delegation: a CORE agent's loop asks one of its topology's FETCH or
// TOOL-EXEC agents through the relay (the same socket or inherited
// connection as its LLM calls, with the same per-message token); the
// runner posts the ask to the target's runner with that runner's token: on
// its own socket on Docker, at its pod's IP on a cluster (found through the
// API at each ask). No sandbox ever gets a network path to another agent. Depth is one: only a core runner has ask targets, and a fetch or
// tool_exec agent has no ask tool.
const (
	// DefaultAskTimeout bounds one ask when the config says nothing.
	DefaultAskTimeout = 120 * time.Second
	// HeaderParentMessage names, on an asked message, the message that
	// asked; both audit lines carry the pair.
	HeaderParentMessage = "X-Meepa-Parent-Message"
)

// AskDialer opens the connection of one ask to the target's runner.
type AskDialer func(ctx context.Context, t agentspec.AskTarget) (net.Conn, error)

// runnerDialer is a backend that knows where other agents' runners are
// (the pod backend asks the API).
type runnerDialer interface {
	DialRunner(ctx context.Context, t agentspec.AskTarget) (net.Conn, error)
}

// asksFor is what a message of cfg may ask: a target with a listen
// address (on Docker) is dialled there, one without (on a cluster,
// agentspec.Validate) through a backend that knows where other runners
// are (a runnerDialer), and fails on any other (dialListen).
func asksFor(cfg *agentspec.Config, backend sandbox.Backend) relay.Asks {
	dial := askDialer(backend)
	return relay.Asks{Targets: cfg.Ask, Limit: askLimit(cfg), Post: func(ctx context.Context, t agentspec.AskTarget, parent, text string) (agent.AskAnswer, int, error) {
		return postAsk(ctx, dial, t, parent, text)
	}}
}

// askDialer reaches a target by its listen address, or through backend
// when it is a runnerDialer and the target has none.
func askDialer(backend sandbox.Backend) AskDialer {
	d, ok := backend.(runnerDialer)
	if !ok {
		return dialListen
	}
	return func(ctx context.Context, t agentspec.AskTarget) (net.Conn, error) {
		if t.Listen != "" {
			return dialListen(ctx, t)
		}
		return d.DialRunner(ctx, t)
	}
}

// dialListen reaches a runner at its listen address, a unix socket or
// 127.0.0.1:PORT.
func dialListen(ctx context.Context, t agentspec.AskTarget) (net.Conn, error) {
	if t.Listen == "" {
		// A cluster's target, asked from a backend without a runnerDialer.
		return nil, fmt.Errorf("agent %s has no listen address, and this backend cannot find runner pods", t.AgentID)
	}
	if sock, ok := strings.CutPrefix(t.Listen, "unix://"); ok {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}
	return (&net.Dialer{}).DialContext(ctx, "tcp", t.Listen)
}

// postAsk sends one message to the target's runner and returns its reply
// or error, the message id it ran under and the HTTP status.
func postAsk(ctx context.Context, dial AskDialer, t agentspec.AskTarget, parent string, text string) (agent.AskAnswer, int, error) {
	if dial == nil {
		dial = dialListen
	}
	// One connection per ask, closed after it: asks are rare next to the
	// message they run, and a kept-alive connection per ask would pile up.
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dial(ctx, t)
	}}
	base, c := "http://runner", &http.Client{Transport: tr}
	body, _ := json.Marshal(MessageRequest{Text: text, Sender: "agent:" + parent, Channel: "ask"})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return agent.AskAnswer{}, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+t.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderParentMessage, parent)
	resp, err := c.Do(req)
	if err != nil {
		return agent.AskAnswer{}, 0, fmt.Errorf("reach agent %s's runner: %w", t.AgentID, err)
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return agent.AskAnswer{MessageID: resp.Header.Get("X-Message-Id")}, resp.StatusCode, err
	}
	var out struct {
		Reply     string      `json:"reply"`
		MessageID string      `json:"message_id"`
		Error     ErrorDetail `json:"error"`
	}
	_ = json.Unmarshal(raw, &out)
	ans := agent.AskAnswer{MessageID: resp.Header.Get("X-Message-Id"), Reply: out.Reply}
	if resp.StatusCode != http.StatusOK {
		return ans, resp.StatusCode, fmt.Errorf("%s: %s", out.Error.Kind, out.Error.Message)
	}
	return ans, resp.StatusCode, nil
}

// askLimit is one ask's bound: the config's, within the message's own.
func askLimit(cfg *agentspec.Config) time.Duration {
	d := DefaultAskTimeout
	if cfg.AskTimeoutSeconds > 0 {
		d = time.Duration(cfg.AskTimeoutSeconds) * time.Second
	}
	return min(d, cfg.Container.Timeout())
}

// parentOf reads the asking message's id from an asked message, or "".
func parentOf(r *http.Request) string {
	p := r.Header.Get(HeaderParentMessage)
	if len(p) > 40 || strings.Trim(p, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		return ""
	}
	return p
}
