package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/httpbound"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/relay"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner/backends"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/version"
)

// Defaults of zero Config fields.
const (
	DefaultQueueSize       = 16
	DefaultMaxRequestBytes = 1 << 20
)

// Error kinds the HTTP API adds to the agent's own (agent.ErrKind*).
const (
	KindBadRequest   = "bad_request"
	KindUnauthorized = "unauthorized"
	KindTooLarge     = "too_large"
	KindQueueFull    = "queue_full"
	KindShuttingDown = "shutting_down"
	KindCancelled    = "cancelled"
	// KindNotEnforced: the message was refused before any container ran,
	// because its ThreeGate firewall is not confirmed in force (503).
	KindNotEnforced = "not_enforced"
	// KindNotFound: GET /v1/messages/{id} for an id with no kept outcome.
	KindNotFound = "not_found"
)

// MessageRequest is the body of POST /v1/messages.
type MessageRequest struct {
	Text           string `json:"text"`
	Sender         string `json:"sender,omitempty"`
	Channel        string `json:"channel,omitempty"`
	ConversationID string `json:"conversation_id,omitempty"`
}

// ErrorBody is every non-200 answer.
type ErrorBody struct {
	Error     ErrorDetail `json:"error"`
	MessageID string      `json:"message_id,omitempty"`
}

// ErrorDetail names what failed: Kind is one of the Kind* constants or an
// agent.ErrKind* value.
type ErrorDetail struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Health is the body of GET /healthz. Extra carries backend-specific
// fields (e.g. landlock_abi) from a backend that implements HealthReporter.
type Health struct {
	OK      bool   `json:"ok"`
	AgentID string `json:"agent_id"`
	Mode    string `json:"mode"`
	// Version and Commit name the runner's build, so that the provider
	// can tell a runner left by another release (drift in the plan).
	Version string `json:"version"`
	Commit  string `json:"commit"`
	// Ready says the next message will not wait for a sandbox to start.
	Ready    bool `json:"ready"`
	Prestart bool `json:"prestart"`
	// Image is the per-message containers' image the runner serves now
	// (container mode), so that whoever rewrote the config and sent
	// SIGHUP can see the reload land.
	Image  string         `json:"image,omitempty"`
	Queued int64          `json:"queued"`
	Busy   bool           `json:"busy"`
	Extra  map[string]any `json:"-"`
}

// HealthReporter is implemented by backends with more to say in /healthz
// (the host backend reports landlock_abi).
type HealthReporter interface {
	Health() map[string]any
}

// BackendFactory makes the sandbox backend for a config, its sandboxes
// connected to relay; backends.New by default.
type BackendFactory func(ctx context.Context, cfg *agentspec.Config, rl *relay.Relay, log hclog.Logger) (sandbox.Backend, string, error)

// newBackend is backends.New with the runner's own relay.
func newBackend(ctx context.Context, cfg *agentspec.Config, rl *relay.Relay, log hclog.Logger) (sandbox.Backend, string, error) {
	return backends.New(ctx, cfg, rl, log)
}

// Options for New. Zero values: an hclog logger named agent-runner at info
// level, and backends.New.
type Options struct {
	Logger     hclog.Logger
	NewBackend BackendFactory
}

// Server is one agent's runner.
type Server struct {
	log        hclog.Logger
	newBackend BackendFactory
	metrics    *metrics
	// relay carries the agent loop's LLM calls and holds the API key.
	relay *relay.Relay

	// turn is the per-agent mutex: one sandbox at a time. Waiting for it is
	// the queue, bounded by cfg.QueueSize.
	turn    chan struct{}
	closing atomic.Bool

	// outcomes are the kept messages' states and results (see
	// pending.kept); async counts the goroutines of asynchronous and
	// resumed messages, which Shutdown waits for.
	outcomes *outcomeStore
	async    sync.WaitGroup
	// journal holds every accepted message on disk until it is answered
	// (nil without Config.Journal); acceptMu orders acceptance.
	journal  *journal
	acceptMu sync.Mutex

	mu      sync.RWMutex // guards cfg, backend, mode, token (swapped by Reload)
	cfg     *agentspec.Config
	backend sandbox.Backend
	mode    string
	token   [32]byte

	http     *http.Server
	maxConns int

	// local is the runner's own egress broker (broker.go), nil until a
	// host-mode message with bound secrets needs it.
	brokerMu sync.Mutex
	local    *localBroker
}

// apiLimits bound the runner's API before it knows who is calling: a
// header block far above what the API needs (a bearer token, an
// Idempotency-Key, the parent message), a second to send it after its
// first byte is not much to ask of a client on this machine, and the
// whole request (1 MiB at most) in 30 s. A blocking message then waits
// and runs as long as its queue and timeout_seconds say; its answer must
// be taken within 30 s. A refusal ends the connection.
var apiLimits = httpbound.Limits{
	MaxHeaderBytes: 16 << 10,
	ReadHeader:     10 * time.Second,
	Read:           30 * time.Second,
	Write:          30 * time.Second,
	Idle:           60 * time.Second,
	CloseOnRefusal: true,
}

// apiConns caps the API's open connections: room for every blocking
// message the queue holds, the one running, and as many again for status
// polls, health checks and asks. Over it a client gets 503 at once.
func apiConns(cfg *agentspec.Config) int {
	q := cfg.QueueSize
	if q <= 0 {
		q = DefaultQueueSize
	}
	return 2*q + 32
}

// New validates cfg and makes its backend, which removes orphan sandboxes
// left by a crash and, with prestart, starts the first container.
func New(ctx context.Context, cfg *agentspec.Config, o Options) (*Server, error) {
	if err := kube.ValidateConfig(cfg); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = hclog.New(&hclog.LoggerOptions{Name: "agent-runner", Level: hclog.Info})
	}
	if o.NewBackend == nil {
		o.NewBackend = newBackend
	}
	s := &Server{
		log:        o.Logger.With("agent_id", cfg.AgentID),
		newBackend: o.NewBackend,
		metrics:    newMetrics(),
		turn:       make(chan struct{}, 1),
		outcomes:   newOutcomeStore(),
	}
	var recs []record
	if cfg.Journal != "" {
		j, r, err := openJournal(cfg.Journal, s.log)
		if err != nil {
			return nil, err
		}
		s.journal, recs = j, r
		s.outcomes.evicted, s.outcomes.buried = j.drop, j.bury
	}
	// The agent's token budget is counted next to the journal, so that a
	// restart does not hand out a fresh window.
	budget, err := relay.OpenBudget(cfg.Journal)
	if err != nil {
		return nil, err
	}
	s.relay = relay.New(s.log, s.metrics, budget)
	// The backend removes the sandboxes a crash left before the journal is
	// resumed: an interrupted message has stopped for good by then.
	b, mode, err := s.newBackend(ctx, cfg, s.relay, s.log)
	if err != nil {
		_ = s.relay.Close()
		return nil, err
	}
	s.cfg, s.backend, s.mode, s.token = cfg, b, mode, sha256.Sum256([]byte(cfg.Token))
	s.resume(recs)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/messages", s.handleMessage)
	mux.HandleFunc("/v1/messages/", s.handleMessageStatus)
	mux.HandleFunc("/healthz", s.handleHealth)
	mux.HandleFunc("/metrics", s.handleMetrics)
	s.http = httpbound.Server(mux, apiLimits, nil)
	s.maxConns = apiConns(cfg)
	return s, nil
}

// Listen opens "unix:///path" (replacing a stale socket, mode 0660) or a
// TCP "host:port".
func Listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		// Only a socket is stale: a listen path that names some other file
		// by mistake must not delete it.
		if fi, err := os.Lstat(path); err == nil {
			if fi.Mode()&os.ModeSocket == 0 {
				return nil, fmt.Errorf("listen %s: %s exists and is not a socket", addr, path)
			}
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("listen %s: remove stale socket: %w", addr, err)
			}
		}
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		if err := os.Chmod(path, 0o660); err != nil {
			return nil, errors.Join(fmt.Errorf("listen %s: %w", addr, err), ln.Close())
		}
		return ln, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return ln, nil
}

// Serve answers on ln until Shutdown; it returns nil after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.log.Info("serving", "listen", ln.Addr().String(), "mode", s.mode)
	if err := httpbound.Serve(s.http, ln, s.maxConns, nil); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops taking messages, lets the one in flight finish (waiting
// messages get 503, asynchronous ones as their outcome), then discards the
// prestarted sandbox. ctx bounds it.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	err := s.http.Shutdown(ctx)
	// An asynchronous message in flight has no handler that http.Shutdown
	// would wait for: wait for it here, so its backend is not closed under it.
	asyncDone := make(chan struct{})
	go func() { s.async.Wait(); close(asyncDone) }()
	select {
	case <-asyncDone:
	case <-ctx.Done():
		err = errors.Join(err, fmt.Errorf("asynchronous messages still running: %w", ctx.Err()))
	}
	s.mu.RLock()
	b := s.backend
	s.mu.RUnlock()
	// The prestarted sandbox is discarded even when the message in flight
	// used up ctx.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return errors.Join(err, b.Close(cctx), s.relay.Close(), s.closeBroker(cctx))
}

// Reload applies a changed config: it waits for the message in flight,
// makes a new backend (so a prestarted container of the old config is never
// used) and closes the old one. Listen cannot change without a restart.
func (s *Server) Reload(ctx context.Context, cfg *agentspec.Config) error {
	if err := kube.ValidateConfig(cfg); err != nil {
		return err
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.turn }()
	s.mu.RLock()
	old, oldCfg := s.backend, s.cfg
	s.mu.RUnlock()
	if cfg.Listen != oldCfg.Listen {
		s.log.Warn("listen address changed; it takes effect at the next restart", "listen", oldCfg.Listen)
	}
	if cfg.Journal != oldCfg.Journal {
		s.log.Warn("journal directory changed; it takes effect at the next restart", "journal_dir", oldCfg.Journal)
	}
	// Close first: each backend removes the agent's sandboxes that are not
	// its own, so the two must not overlap.
	if err := old.Close(ctx); err != nil {
		s.log.Warn("close old backend", "error", err)
	}
	b, mode, err := s.newBackend(ctx, cfg, s.relay, s.log)
	if err != nil {
		// Keep serving the old config rather than nothing.
		var rerr error
		if b, mode, rerr = s.newBackend(ctx, oldCfg, s.relay, s.log); rerr != nil {
			return errors.Join(fmt.Errorf("reload: %w", err), fmt.Errorf("restore the old config: %w", rerr))
		}
		s.mu.Lock()
		s.backend, s.mode = b, mode
		s.mu.Unlock()
		return fmt.Errorf("reload (still serving the old config): %w", err)
	}
	s.mu.Lock()
	s.cfg, s.backend, s.mode, s.token = cfg, b, mode, sha256.Sum256([]byte(cfg.Token))
	s.mu.Unlock()
	s.log.Info("config reloaded")
	return nil
}

func (s *Server) snapshot() (*agentspec.Config, sandbox.Backend, string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg, s.backend, s.mode
}

func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return false
	}
	s.mu.RLock()
	want, cfg := s.token, s.cfg
	s.mu.RUnlock()
	if agentspec.IsShortToken(tok) {
		// A short-lived token (meepa_agent_token) made from this agent's
		// bearer token; its MAC is compared in constant time.
		return agentspec.VerifyShortToken(cfg.Token, cfg.AgentID, tok, time.Now()) == nil
	}
	// Compare fixed-size digests so neither content nor length leaks by timing.
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

func (s *Server) handleMessage(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "", KindBadRequest, "use POST")
		return
	}
	if !s.authorized(r) {
		s.metrics.rejected(KindUnauthorized)
		w.Header().Set("WWW-Authenticate", `Bearer realm="agent-runner"`)
		writeError(w, http.StatusUnauthorized, "", KindUnauthorized, "missing or wrong bearer token")
		return
	}
	cfg, _, _ := s.snapshot()
	limit := cfg.MaxRequestBytes
	if limit <= 0 {
		limit = DefaultMaxRequestBytes
	}
	body, err := readBody(w, r, limit)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.metrics.rejected(KindTooLarge)
			writeError(w, http.StatusRequestEntityTooLarge, "", KindTooLarge, fmt.Sprintf("request body over %d bytes", limit))
			return
		}
		s.metrics.rejected(KindBadRequest)
		writeError(w, http.StatusBadRequest, "", KindBadRequest, "read body: "+err.Error())
		return
	}
	var msg MessageRequest
	if err := json.Unmarshal(body, &msg); err != nil {
		s.metrics.rejected(KindBadRequest)
		writeError(w, http.StatusBadRequest, "", KindBadRequest, "body is not a JSON message: "+err.Error())
		return
	}
	if strings.TrimSpace(msg.Text) == "" {
		s.metrics.rejected(KindBadRequest)
		writeError(w, http.StatusBadRequest, "", KindBadRequest, `"text" is empty`)
		return
	}
	async, err := asyncRequested(r)
	if err != nil {
		s.metrics.rejected(KindBadRequest)
		writeError(w, http.StatusBadRequest, "", KindBadRequest, err.Error())
		return
	}
	keyHash, err := idempotencyKey(r)
	if err != nil {
		s.metrics.rejected(KindBadRequest)
		writeError(w, http.StatusBadRequest, "", KindBadRequest, err.Error())
		return
	}
	queueSize := cfg.QueueSize
	if queueSize <= 0 {
		queueSize = DefaultQueueSize
	}
	p := &pending{msg: msg, bytesIn: len(body), parent: parentOf(r), async: async, keyHash: keyHash}
	for {
		first, ref := s.admit(p, queueSize)
		if ref != nil {
			writeError(w, ref.status, "", ref.kind, ref.text)
			return
		}
		if first == "" {
			break
		}
		if s.answerRepeat(w, r, p, first) {
			return
		}
	}
	if async {
		s.submitAsync(w, p)
		return
	}
	s.runBlocking(w, r, p)
}

// runBlocking waits for p's turn, bounded by the queue; a client that
// gives up leaves the queue, and its message is withdrawn.
func (s *Server) runBlocking(w http.ResponseWriter, r *http.Request, p *pending) {
	if !p.turnHeld {
		select {
		case s.turn <- struct{}{}:
		case <-r.Context().Done():
			// Withdrawn before it leaves the queue count: whoever sees the
			// queue empty finds the journal without it.
			s.withdraw(p)
			s.metrics.queued.Add(-1)
			s.metrics.rejected(KindCancelled)
			return
		}
	}
	s.metrics.queued.Add(-1)
	defer func() { <-s.turn }()
	if s.closing.Load() {
		s.withdraw(p)
		writeError(w, http.StatusServiceUnavailable, "", KindShuttingDown, "the runner is shutting down")
		return
	}
	// The config and backend are read after the turn is ours: a Reload
	// holds the turn, so a message never straddles two configs. A client
	// that disconnects does not stop the message: the agent may be
	// half-way through writing its memory. The timeout still bounds it.
	res := s.execute(context.WithoutCancel(r.Context()), p)
	res.write(w, p.id)
}

func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	return buf.Bytes(), err
}

// result is the answer to a message that had its turn: the HTTP status and
// the JSON body, newline-terminated.
type result struct {
	status int
	body   []byte
}

func errorResult(status int, id, kind, msg string) result {
	body, _ := json.Marshal(ErrorBody{Error: ErrorDetail{Kind: kind, Message: msg}, MessageID: id})
	return result{status: status, body: append(body, '\n')}
}

// write answers res as the blocking call does.
func (res result) write(w http.ResponseWriter, id string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Message-Id", id)
	w.WriteHeader(res.status)
	_, _ = w.Write(res.body)
}

// run executes message p in the agent's turn and returns the answer.
func (s *Server) run(ctx context.Context, cfg *agentspec.Config, backend sandbox.Backend, p *pending) result {
	id, queued := p.id, time.Since(p.queuedAt)
	req := BuildRequest(cfg, id, p.msg)
	// A FETCH agent's message gets its own egress credential, in its proxy
	// variables; it is revoked when the message ends.
	proxyURL := ""
	if l, ok := backend.(proxyLocator); ok && cfg.Egress != nil {
		var err error
		if proxyURL, err = l.EgressProxy(ctx); err != nil {
			return errorResult(http.StatusServiceUnavailable, id, agent.ErrKindSandbox, "egress proxy: "+err.Error())
		}
	}
	ecfg, socket, err := s.egressConfig(ctx, cfg)
	if err != nil {
		return errorResult(http.StatusServiceUnavailable, id, agent.ErrKindSandbox, "egress broker: "+err.Error())
	}
	egress, err := beginEgress(ctx, ecfg, id, &req, proxyURL)
	req.EgressSocket = socket
	if err != nil {
		return errorResult(http.StatusServiceUnavailable, id, agent.ErrKindSandbox, "egress: "+agentspec.Redactor(cfg).String(err.Error()))
	}
	job := sandbox.Job{MessageID: id, Timeout: cfg.Container.Timeout()}
	var usage relay.Usage
	endRelay := func() {}
	if agentspec.NeedsRelay(cfg) {
		// The loop gets a token for this message and the relay's address;
		// the key stays here.
		token, end := s.relay.Begin(id, cfg.LLM, cfg.LLMLimits, cfg.Container.Timeout(), asksFor(cfg, backend))
		// The token dies with the message, whatever a tool left behind.
		endRelay = func() { usage = end() }
		req.LLM.APIKey = token
		if relay.Uses(cfg.LLM.Provider) {
			req.LLM.BaseURL = relay.BaseURL(cfg.LLM.Provider)
		}
		for _, a := range cfg.Ask {
			req.Asks = append(req.Asks, agent.AskTarget{AgentID: a.AgentID, Role: a.Role})
		}
		// The backend connected its sandboxes to the relay when it was
		// made (backends.New); agent-run learns which way.
		switch backend.RelayLink() {
		case sandbox.RelayAttached:
			req.Relay = &agent.Relay{Stream: true}
		case sandbox.RelayMounted:
			req.Relay = &agent.Relay{Socket: sandbox.RelayMountDir + "/" + relay.SocketName}
		case sandbox.RelayInherited:
			req.Relay = &agent.Relay{FD: agent.RelayFD}
		default:
			return errorResult(http.StatusInternalServerError, id, agent.ErrKindSandbox, "the sandbox backend offers no way to the LLM relay")
		}
	}
	stdin, err := json.Marshal(req)
	if err != nil {
		return errorResult(http.StatusInternalServerError, id, agent.ErrKindInternal, "encode request")
	}
	job.Stdin = stdin
	begin := time.Now()
	out, runErr := backend.Run(ctx, job)
	endRelay()
	egressReq, egressRefused := agentspec.Unreported, agentspec.Unreported
	if egress != nil {
		n, err := egress.end(context.WithoutCancel(ctx))
		if err != nil {
			s.log.Warn("egress credential not revoked; it expires with the message's timeout", "message_id", id, "error", err)
		} else {
			egressReq, egressRefused = n.Requests, n.Refused
		}
	}
	status, kind, detail, reply := classify(cfg, out, runErr)
	dur := time.Since(begin)

	outcome := "ok"
	var body []byte
	if kind != "" {
		outcome = kind
		body, _ = json.Marshal(ErrorBody{Error: ErrorDetail{Kind: kind, Message: detail}, MessageID: id})
	} else {
		body, _ = json.Marshal(reply)
	}
	s.metrics.message(outcome, dur, out.StartLatency, out.SandboxID != "")
	refused := 0
	if reply != nil {
		// Counted inside the sandbox; bounded so it cannot inflate metrics.
		refused = min(max(reply.ToolsRefused, 0), 1000)
		s.metrics.refusedTools(refused)
	}
	// The audit line: what ran where and how it ended; never the text, the
	// reply or a secret.
	s.log.Info("message", append([]any{
		"message_id", id,
		"sandbox_id", shortID(out.SandboxID),
		"image_id", out.ImageID,
		"outcome", outcome,
		"status", status,
		"duration_ms", dur.Milliseconds(),
		"start_ms", out.StartLatency.Milliseconds(),
		"queued_ms", queued.Milliseconds(),
		"exit_code", out.ExitCode,
		"bytes_out", len(body),
		"role", cfg.Role,
		"tools_refused", refused,
		"llm_calls", usage.Calls,
		"llm_refused", usage.Refused,
		"llm_input_tokens", usage.InputTokens,
		"llm_output_tokens", usage.OutputTokens,
		"llm_budget_refused", usage.BudgetRefused,
		"llm_agent_window_tokens", usage.AgentWindowTokens,
		"ask_message_ids", strings.Join(usage.Asks, ","),
		"egress_requests", egressReq,
		"egress_refused", egressRefused,
	}, p.auditFields()...)...)
	if runErr != nil {
		s.log.Error("sandbox failed", "message_id", id, "error", agentspec.Redactor(cfg).String(runErr.Error()))
	}
	return result{status: status, body: append(body, '\n')}
}

// BuildRequest is the agent-run request for one message: the message plus
// the agent's LLM settings (without the API key, which never leaves the
// runner: run adds the relay and its token), never a secret (run adds a
// bound one's placeholder); on a cluster, the workspace seed
// (Kubernetes.Seed).
func BuildRequest(cfg *agentspec.Config, id string, msg MessageRequest) agent.Request {
	llm := cfg.LLM
	llm.APIKey = ""
	// The relay refuses a call that asks for more than max_tokens_per_call,
	// or names no bound at all: the loop always names one within it.
	limit := int(cfg.LLMLimits.Effective().MaxTokensPerCall)
	if llm.MaxTokens <= 0 {
		llm.MaxTokens = agentspec.DefaultLoopMaxTokens
	}
	llm.MaxTokens = min(llm.MaxTokens, limit)
	seed := agentspec.SeedOf(cfg)
	return agent.Request{
		Seed:    seed,
		AgentID: cfg.AgentID,
		Message: agent.Message{
			ID:             id,
			Text:           msg.Text,
			Sender:         msg.Sender,
			Channel:        msg.Channel,
			ConversationID: msg.ConversationID,
		},
		LLM:                  llm,
		InjectCredentialsEnv: cfg.InjectCredentialsEnv,
		RedactSecrets:        cfg.RedactSecrets,
		Env:                  cfg.Env,
		MaxSteps:             cfg.MaxSteps,
		Role:                 cfg.Role,
	}
}

// classify turns a sandbox outcome into the HTTP answer: 200 and the reply,
// or a status, an error kind and a message.
func classify(cfg *agentspec.Config, out sandbox.Outcome, runErr error) (status int, kind, detail string, reply *agent.Reply) {
	red := agentspec.Redactor(cfg)
	switch {
	case out.TimedOut:
		return http.StatusGatewayTimeout, agent.ErrKindTimeout,
			fmt.Sprintf("no reply within %s; the sandbox was killed", cfg.Container.Timeout()), nil
	case out.OOMKilled:
		return http.StatusInternalServerError, agent.ErrKindOOM,
			fmt.Sprintf("the sandbox ran out of memory (limit %s) and was killed", agentspec.MemoryOrDefault(cfg.Container.MemoryLimit)), nil
	case errors.Is(runErr, sandbox.ErrNotEnforced):
		return http.StatusServiceUnavailable, KindNotEnforced, red.String(runErr.Error()), nil
	case errors.Is(runErr, sandbox.ErrReplyTooLarge):
		return http.StatusInternalServerError, agent.ErrKindProtocol, runErr.Error(), nil
	case runErr != nil:
		return http.StatusInternalServerError, agent.ErrKindSandbox, red.String(runErr.Error()), nil
	}
	var r agent.Reply
	dec := json.NewDecoder(bytes.NewReader(out.Stdout))
	parseErr := dec.Decode(&r)
	if parseErr == nil && dec.More() {
		parseErr = errors.New("more than one JSON value")
	}
	if parseErr != nil {
		if out.ExitCode != 0 {
			return http.StatusInternalServerError, agent.ErrKindExit,
				fmt.Sprintf("agent exited with code %d without a reply%s", out.ExitCode, stderrNote(out.StderrTail, red)), nil
		}
		return http.StatusInternalServerError, agent.ErrKindProtocol,
			fmt.Sprintf("agent output is not one JSON reply: %v", parseErr), nil
	}
	if r.ErrorKind != "" {
		// The kind comes from inside the sandbox: only the kinds agent-run
		// may set pass, so an agent cannot pose as OOM or timeout, or grow
		// the metrics by an outcome label per message.
		if !slices.Contains(agentKinds, r.ErrorKind) {
			return http.StatusInternalServerError, agent.ErrKindProtocol,
				fmt.Sprintf("agent reported error kind %.40q, which agent-run never sets", r.ErrorKind), nil
		}
		return http.StatusInternalServerError, r.ErrorKind, red.String(r.Error), nil
	}
	if out.ExitCode != 0 {
		return http.StatusInternalServerError, agent.ErrKindExit,
			fmt.Sprintf("agent exited with code %d%s", out.ExitCode, stderrNote(out.StderrTail, red)), nil
	}
	if cfg.RedactSecrets {
		// agent-run redacts too; this second pass holds even for an agent
		// that does not.
		agent.RedactReply(red, &r)
	}
	r.Final = false // between agent-run and the sandbox only
	return http.StatusOK, "", "", &r
}

// agentKinds are the error kinds agent-run sets in its Reply; the others
// are the runner's own.
var agentKinds = []string{agent.ErrKindLLM, agent.ErrKindRequest, agent.ErrKindSteps, agent.ErrKindInternal, agent.ErrKindWorkspace}

// stderrNote is the end of the sandbox's stderr for an error message,
// redacted before it is cut so that no part of a secret survives the cut.
func stderrNote(tail []byte, red *redact.Redactor) string {
	t := strings.TrimSpace(red.String(string(tail)))
	if t == "" {
		return ""
	}
	if len(t) > 512 {
		t = "…" + t[len(t)-512:]
	}
	return ": " + t
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	cfg, b, mode := s.snapshot()
	h := Health{
		OK:       !s.closing.Load(),
		AgentID:  cfg.AgentID,
		Mode:     mode,
		Ready:    b.Ready(),
		Prestart: cfg.Container.Enabled && cfg.Container.Prestart,
		Queued:   s.metrics.queued.Load(),
		Busy:     s.metrics.inFlight.Load() > 0,
		Version:  version.Version,
		Commit:   version.Commit,
	}
	if cfg.Container.Enabled {
		h.Image = cfg.Container.Image
	}
	if hr, ok := b.(HealthReporter); ok {
		h.Extra = hr.Health()
	}
	status := http.StatusOK
	if !h.OK {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(h)
}

// MarshalJSON flattens Extra into the object.
func (h Health) MarshalJSON() ([]byte, error) {
	type plain Health
	raw, err := json.Marshal(plain(h))
	if err != nil || len(h.Extra) == 0 {
		return raw, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	for k, v := range h.Extra {
		if _, taken := m[k]; !taken {
			m[k] = v
		}
	}
	return json.Marshal(m)
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	_, b, _ := s.snapshot()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	records, bytes := s.journal.stats()
	kept, keptBytes := s.outcomes.kept()
	g := gauges{ready: b.Ready(), kept: kept, keptBytes: keptBytes, journalRecords: records, journalBytes: bytes}
	if err := s.metrics.write(w, g); err != nil {
		s.log.Debug("metrics: client gone", "error", err)
	}
}

func writeError(w http.ResponseWriter, status int, id, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if id != "" {
		w.Header().Set("X-Message-Id", id)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(ErrorBody{Error: ErrorDetail{Kind: kind, Message: msg}, MessageID: id})
}

func newMessageID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "msg-" + hex.EncodeToString(b[:])
}

func shortID(id string) string {
	// Only a Docker container id is cut; a pod's name is kept whole.
	if len(id) > 12 && strings.Trim(id, "0123456789abcdef") == "" {
		return id[:12]
	}
	return id
}
