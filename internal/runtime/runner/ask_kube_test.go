package runner

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// dialerBackend is a backend that knows where runners are.
type dialerBackend struct {
	sandbox.Backend
	dialed *agentspec.AskTarget
}

func (d *dialerBackend) DialRunner(_ context.Context, t agentspec.AskTarget) (net.Conn, error) {
	d.dialed = &t
	return nil, errors.New("dialed")
}

// On a cluster an ask is dialled by the backend (the pod lookup); a
// backend that cannot find pods fails the ask instead of reaching for a
// listen address; on Docker the listen address is dialled.
func TestAsksFor(t *testing.T) {
	cfg := kubeConfig()
	cfg.Role = "core"
	cfg.Ask = []agentspec.AskTarget{{AgentID: "te", Role: "tool_exec", Port: 8080, Token: "t"}}
	cfg.AskTimeoutSeconds = 7
	ctx := context.Background()
	b := &dialerBackend{}
	a := asksFor(cfg, b)
	if len(a.Targets) != 1 || a.Limit != 7*time.Second {
		t.Errorf("asks %+v", a)
	}
	if _, err := askDialer(b)(ctx, a.Targets[0]); err == nil || err.Error() != "dialed" || b.dialed == nil || b.dialed.AgentID != "te" {
		t.Errorf("dial on kubernetes: %v, backend dialled %+v", err, b.dialed)
	}
	if _, err := askDialer(nil)(ctx, a.Targets[0]); err == nil || !strings.Contains(err.Error(), "cannot find runner pods") {
		t.Errorf("a backend without a pod lookup: %v", err)
	}
	srv := askServer(t)
	cfg.Kubernetes = nil
	conn, err := askDialer(b)(ctx, agentspec.AskTarget{Listen: srv.Listener.Addr().String()})
	if err != nil {
		t.Fatalf("dial by listen on Docker: %v", err)
	}
	_ = conn.Close()
}

// askServer answers one message as a runner does, checking what an ask
// sends: the target's token, the asking message, the ask channel.
func askServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m MessageRequest
		_ = json.NewDecoder(r.Body).Decode(&m)
		if r.URL.Path != "/v1/messages" || r.Header.Get("Authorization") != "Bearer tok-te" || r.Header.Get(HeaderParentMessage) != "m-parent" ||
			m.Sender != "agent:m-parent" || m.Channel != "ask" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("X-Message-Id", "m-child")
		_ = json.NewEncoder(w).Encode(map[string]string{"reply": "answer to " + m.Text})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// postAsk goes through the dialler it is given, whatever the address
// says: on a cluster the pod lookup decides where the ask goes.
func TestPostAskDialer(t *testing.T) {
	srv := askServer(t)
	var dialled string
	dial := func(ctx context.Context, tg agentspec.AskTarget) (net.Conn, error) {
		dialled = tg.AgentID
		return (&net.Dialer{}).DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}
	target := agentspec.AskTarget{AgentID: "te", Role: "tool_exec", Port: 8080, Token: "tok-te"}
	ans, status, err := postAsk(context.Background(), dial, target, "m-parent", "hi")
	if err != nil || status != http.StatusOK || ans.Reply != "answer to hi" || ans.MessageID != "m-child" || dialled != "te" {
		t.Errorf("postAsk = %+v, %d, %v (dialled %q)", ans, status, err, dialled)
	}
	target.Token = "wrong"
	if _, status, err := postAsk(context.Background(), dial, target, "m-parent", "hi"); err == nil || status != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, %v", status, err)
	}
}
