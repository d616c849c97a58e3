package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// maxAskText bounds what an ask sends.
const maxAskText = 64 << 10

// Asks are what one message may ask: the targets, the bound of one ask,
// and how an ask reaches the target's runner.
type Asks struct {
	Targets []agentspec.AskTarget
	Limit   time.Duration
	Post    AskPoster
}

// AskPoster sends one ask (text, on behalf of the message parent) to the
// target's runner and returns its answer, the HTTP status and an error
// when it failed.
type AskPoster func(ctx context.Context, t agentspec.AskTarget, parent, text string) (agent.AskAnswer, int, error)

func (r *Relay) serveAsk(w http.ResponseWriter, req *http.Request, s *relaySession, refuse func(int, string)) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxAskText+1024))
	if err != nil {
		refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf("ask over %d bytes", maxAskText))
		return
	}
	var ask agent.AskRequest
	if json.Unmarshal(body, &ask) != nil || strings.TrimSpace(ask.Text) == "" {
		refuse(http.StatusBadRequest, `want {"agent_id", "text"}`)
		return
	}
	var target *agentspec.AskTarget
	var names []string
	for i, t := range s.asks.Targets {
		names = append(names, t.AgentID)
		if t.AgentID == ask.AgentID {
			target = &s.asks.Targets[i]
		}
	}
	if target == nil {
		refuse(http.StatusForbidden, fmt.Sprintf("agent %q is not one this agent may ask (threegate.ask: %s)", ask.AgentID, strings.Join(names, ", ")))
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), s.asks.Limit)
	defer cancel()
	begin := time.Now()
	ans, status, err := s.asks.Post(ctx, *target, s.messageID, ask.Text)
	if ans.MessageID != "" {
		s.mu.Lock()
		s.usage.Asks = append(s.usage.Asks, ans.MessageID)
		s.mu.Unlock()
	}
	r.log.Info("ask", "message_id", s.messageID, "ask_agent_id", target.AgentID, "ask_message_id", ans.MessageID,
		"status", status, "duration_ms", time.Since(begin).Milliseconds())
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s", s.asks.Limit)
		}
		ans.Error = err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ans)
}
