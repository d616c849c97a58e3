package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/httpbound"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
)

const (
	// MaxResponseBytes bounds one relayed answer.
	MaxResponseBytes = 8 << 20
	// SocketName is the relay's socket inside RelayDir.
	SocketName = "llm.sock"
	// relayHost is the host name the loop's base URL carries; the relay
	// ignores it, since the socket alone decides where a request goes.
	relayHost = "meepa-relay"
	// Path prefixes of the two wire formats on the relay.
	relayOpenAIPrefix    = "/openai/"
	relayAnthropicPrefix = "/anthropic/"
	// defaultAnthropicVersion is sent when the caller names none.
	defaultAnthropicVersion = "2023-06-01"
)

// Usage is what one message did through the relay.
type Usage struct {
	Calls   int
	Refused int
	// Asks are the message ids of the asks this message made.
	Asks         []string
	InputTokens  int64
	OutputTokens int64
	// BudgetRefused is the budget ("message" or "agent") that refused one
	// of the message's calls, or "".
	BudgetRefused string
	// AgentWindowTokens is the agent's count in the current budget window
	// when the message ended.
	AgentWindowTokens int64
}

// relaySession is one message's right to the relay.
type relaySession struct {
	messageID string
	llm       agentspec.LLMConfig
	limits    agentspec.LLMLimits // effective
	timeout   time.Duration
	asks      Asks
	// red knows the real key's spellings: the answers it cleans and the
	// texts it scrubs for the loop (serveScrub).
	red *redact.Redactor

	mu    sync.Mutex
	usage Usage
	// scrubCalls and scrubBytes count what serveScrub did for the message.
	scrubCalls int
	scrubBytes int64
}

// Metrics is what the relay counts, for the runner's /metrics.
type Metrics interface {
	// Relayed counts one call by outcome (ok, refused, unauthorized,
	// upstream_error).
	Relayed(outcome string)
	// Tokens adds what a relayed model answer reported.
	Tokens(in, out int64)
	// BudgetRefused counts a call refused by the budget named ("message"
	// or "agent").
	BudgetRefused(which string)
	// AgentWindow is the agent's count in its current budget window.
	AgentWindow(n int64)
}

// Relay serves the LLM relay for one runner.
type Relay struct {
	log     hclog.Logger
	metrics Metrics
	// upstream carries the relayed calls; it never follows a redirect.
	upstream *http.Client

	mu       sync.Mutex
	sessions map[[32]byte]*relaySession // by sha256 of the token
	// budget counts the agent's tokens over LLMLimits' window.
	budget *Budget

	// The container-mode socket; empty until Listen.
	dir    string
	ln     net.Listener
	server *http.Server
}

// New is a relay that counts into m and keeps the agent's window in budget
// (OpenBudget; nil: a fresh one, in memory only). It serves nothing until
// Listen, Pair or ServeConn.
func New(log hclog.Logger, m Metrics, budget *Budget) *Relay {
	if budget == nil {
		budget = &Budget{now: time.Now}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxResponseHeaderBytes = 64 << 10
	return &Relay{
		log:     log.Named("relay"),
		metrics: m,
		upstream: &http.Client{
			Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		sessions: map[[32]byte]*relaySession{},
		budget:   budget,
	}
}

// Listen opens the relay's unix socket in dir (made when missing, mode
// 0755 so the sandbox user can reach the socket; the token guards it).
func (r *Relay) Listen(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("relay dir: %w", err)
	}
	// A directory someone else made (in a shared temp dir), or a symlink to
	// one, is refused: its owner could swap the socket.
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("relay dir: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || (ok && int(st.Uid) != os.Geteuid()) {
		return fmt.Errorf("relay dir %s: not a directory of uid %d", dir, os.Geteuid())
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("relay dir: %w", err)
	}
	sock := filepath.Join(dir, SocketName)
	if fi, err := os.Lstat(sock); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("relay socket %s exists and is not a socket", sock)
		}
		if err := os.Remove(sock); err != nil {
			return fmt.Errorf("relay socket: remove stale: %w", err)
		}
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("relay listen: %w", err)
	}
	// Any uid may connect (the sandbox user is not the runner's); only a
	// live message's token gets anything.
	if err := os.Chmod(sock, 0o666); err != nil {
		return errors.Join(fmt.Errorf("relay listen: %w", err), ln.Close())
	}
	r.dir, r.ln = dir, ln
	r.server = httpbound.Server(r, relayLimits, nil)
	go func() { _ = httpbound.Serve(r.server, ln, relayConns, nil) }()
	return nil
}

// Dir is the directory holding the relay socket (bind-mounted into the
// per-message containers); empty before Listen.
func (r *Relay) Dir() string { return r.dir }

// ListenIn opens the relay's socket in dir unless it has one already: it
// keeps its first directory for the runner's life, since the sandboxes
// must mount where the socket is, not where a reloaded config would put
// it. It returns the directory in use.
func (r *Relay) ListenIn(dir string) (string, error) {
	if cur := r.Dir(); cur != "" {
		if cur != dir {
			r.log.Warn("relay directory changed; it takes effect at the next restart", "relay_dir", cur)
		}
		return cur, nil
	}
	return dir, r.Listen(dir)
}

// Close stops the socket.
func (r *Relay) Close() error {
	if r.server == nil {
		return nil
	}
	return r.server.Close()
}

// Begin opens a message's session and returns its token: 32 random bytes,
// hex. end closes it and returns what the message did through the relay.
func (r *Relay) Begin(messageID string, llm agentspec.LLMConfig, limits agentspec.LLMLimits, timeout time.Duration, asks Asks) (token string, end func() Usage) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	token = "meepa-relay-" + hex.EncodeToString(b[:])
	key := sha256.Sum256([]byte(token))
	s := &relaySession{messageID: messageID, llm: llm, limits: limits.Effective(), timeout: timeout, asks: asks, red: redact.NewRedactor(llm.APIKey)}
	r.mu.Lock()
	r.sessions[key] = s
	r.mu.Unlock()
	return token, func() Usage {
		r.mu.Lock()
		delete(r.sessions, key)
		r.mu.Unlock()
		window := r.budget.used(s.limits.Window())
		s.mu.Lock()
		defer s.mu.Unlock()
		u := s.usage
		u.AgentWindowTokens = window
		return u
	}
}

// Pair makes a connected socketpair for a host-mode message: the relay
// serves HTTP on one end until the returned stop is called; the other end
// is for the child (inherited as agent.RelayFD).
func (r *Relay) Pair() (child *os.File, stop func(), err error) {
	fds, err := socketpair()
	if err != nil {
		return nil, nil, fmt.Errorf("relay socketpair: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "relay")
	child = os.NewFile(uintptr(fds[1]), "relay-child")
	conn, err := net.FileConn(mine)
	_ = mine.Close() // conn holds its own descriptor, or there is none
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("relay socketpair: %w", err), child.Close())
	}
	return child, r.ServeConn(conn), nil
}

// ServeConn serves the relay on one connection (a socketpair's end, or the
// one a pod's framed stdio carries) until the returned stop is called.
func (r *Relay) ServeConn(conn net.Conn) (stop func()) {
	srv := httpbound.Server(r, relayConnLimits, nil)
	go func() { _ = srv.Serve(&oneConn{c: conn, done: make(chan struct{})}) }()
	return func() { _ = srv.Close(); _ = conn.Close() }
}

// oneConn is a listener that hands out one connection, then waits for Close.
type oneConn struct {
	mu   sync.Mutex
	c    net.Conn
	done chan struct{}
	once sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.c
	l.c = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return &net.UnixAddr{Name: "relay-pair", Net: "unix"} }

// relayError is the relay's own refusal, in a shape both SDKs report.
func relayError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"type": "meepa_relay", "message": msg}})
}

// session finds the live session of the request's token: a bearer token
// (OpenAI) or x-api-key (Anthropic).
func (r *Relay) session(req *http.Request) *relaySession {
	tok, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok {
		tok = req.Header.Get("X-Api-Key")
	}
	if tok == "" {
		return nil
	}
	key := sha256.Sum256([]byte(tok))
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[key]
}

// ServeHTTP relays one model call.
func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s := r.session(req)
	if s == nil {
		r.metrics.Relayed("unauthorized")
		relayError(w, http.StatusUnauthorized, "no live message has this token")
		return
	}
	refuse := func(status int, msg string) {
		s.mu.Lock()
		s.usage.Refused++
		s.mu.Unlock()
		r.metrics.Relayed("refused")
		r.log.Warn("relay refused", "message_id", s.messageID, "method", req.Method, "path", bounded(req.URL.Path, 80), "reason", msg)
		relayError(w, status, msg)
	}
	// An absolute-form target or CONNECT asks the relay to act as a proxy
	// to some other host: it never does.
	if req.Method == http.MethodConnect || req.URL.Host != "" {
		refuse(http.StatusForbidden, "the relay forwards only to the agent's configured model endpoint")
		return
	}
	if req.URL.Path == agent.AskPath && req.Method == http.MethodPost {
		r.serveAsk(w, req, s, refuse)
		return
	}
	if req.URL.Path == agent.ScrubPath && req.Method == http.MethodPost {
		r.serveScrub(w, req, s, refuse)
		return
	}
	upstreamPath, ok := relayRoute(s.llm.Provider, req.URL.Path)
	if !ok {
		refuse(http.StatusNotFound, fmt.Sprintf("the relay serves only POST %s for provider %q", relayEndpoint(s.llm.Provider), s.llm.Provider))
		return
	}
	if req.Method != http.MethodPost {
		refuse(http.StatusMethodNotAllowed, "use POST")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, agent.MaxRequestBytes))
	if err != nil {
		refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", agent.MaxRequestBytes))
		return
	}
	if why := relayBodyRefusal(policyOf(s), body); why != "" {
		refuse(http.StatusBadRequest, why)
		return
	}
	if which, why := r.overBudget(s); why != "" {
		s.mu.Lock()
		if s.usage.BudgetRefused == "" {
			s.usage.BudgetRefused = which
		}
		s.mu.Unlock()
		r.metrics.BudgetRefused(which)
		// 403, not 429: the SDKs retry a 429, and waiting does not help
		// before the window ends.
		refuse(http.StatusForbidden, why)
		return
	}
	base := strings.TrimSuffix(s.llm.BaseURL, "/")
	if base == "" {
		base = strings.TrimSuffix(defaultBase(s.llm.Provider), "/")
	}
	ctx, cancel := context.WithTimeout(req.Context(), s.timeout)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/"+upstreamPath, bytes.NewReader(body))
	if err != nil {
		refuse(http.StatusBadGateway, "bad base_url")
		return
	}
	out.Header.Set("Content-Type", "application/json")
	out.Header.Set("Accept", "application/json")
	out.Header.Set("User-Agent", "meepa-relay")
	switch s.llm.Provider {
	case agentspec.ProviderOpenAI:
		out.Header.Set("Authorization", "Bearer "+s.llm.APIKey)
	case agentspec.ProviderAnthropic:
		out.Header.Set("X-Api-Key", s.llm.APIKey)
		v := req.Header.Get("Anthropic-Version")
		if v == "" {
			v = defaultAnthropicVersion
		}
		out.Header.Set("Anthropic-Version", v)
		// No Anthropic-Beta: beta features include server-side tools that
		// fetch from the web, which would give a sandbox without network
		// (TOOL-EXEC) a way out through the model. Generally available
		// ones (web_search_20250305) need no header: relayBodyRefusal
		// keeps them out.
	}
	resp, err := r.upstream.Do(out)
	if err != nil {
		s.mu.Lock()
		s.usage.Calls++
		s.mu.Unlock()
		r.metrics.Relayed("upstream_error")
		relayError(w, http.StatusBadGateway, "model endpoint: "+s.red.String(err.Error()))
		return
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	answer, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil || len(answer) > MaxResponseBytes {
		s.mu.Lock()
		s.usage.Calls++
		s.mu.Unlock()
		r.metrics.Relayed("upstream_error")
		relayError(w, http.StatusBadGateway, fmt.Sprintf("model answer unreadable or over %d bytes", MaxResponseBytes))
		return
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		s.mu.Lock()
		s.usage.Calls++
		s.mu.Unlock()
		r.metrics.Relayed("upstream_error")
		// Neither the sandbox nor the log gets the body: the status and its
		// size say enough to tell a bad key from a bad request, and the
		// body may carry the key in an encoding no redactor knows.
		r.log.Warn("model endpoint answered an error", "message_id", s.messageID, "status", resp.StatusCode, "body_bytes", len(answer))
		relayError(w, resp.StatusCode, fmt.Sprintf("the model endpoint answered %d %s (the relay does not pass the endpoint's error body on; the runner's log has the status)",
			resp.StatusCode, http.StatusText(resp.StatusCode)))
		return
	}
	in, outTok := usageOf(s.llm.Provider, answer)
	s.mu.Lock()
	s.usage.Calls++
	s.usage.InputTokens += in
	s.usage.OutputTokens += outTok
	s.mu.Unlock()
	r.metrics.Relayed("ok")
	r.metrics.Tokens(in, outTok)
	window, err := r.budget.add(in+outTok, s.limits.Window())
	r.metrics.AgentWindow(window)
	if err != nil {
		// The count in memory holds; a restart would lose this call's share.
		r.log.Error("llm budget: record not written", "error", err)
	}
	// An endpoint that echoes the key in a success answer must not hand it
	// in, in any of the forms the redactor knows (JSON-escaped among them).
	if s.llm.APIKey != "" {
		answer = []byte(s.red.String(string(answer)))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// Bounds of what serveScrub does for one message: enough for every write
// a message can make (its text and reply, the seed, a write_file per tool
// call of MaxMaxSteps steps), few enough that the route is no way to try
// guesses at the key in bulk.
const (
	maxScrubCallsPerMessage = 2048
	maxScrubBytesPerMessage = 64 << 20
)

// serveScrub hands the caller its own text back with every spelling of the
// agent's key replaced (redact.Redacted): the loop, which never holds the
// key, sends every text it is about to write into the workspace through
// it. The key stays here; the answer is the only thing that depends on it.
//
// What the route tells a caller that holds the token (the loop, and any
// tool of the sandbox, which shares its process tree) is whether its text
// holds a whole spelling of the key. The Redactor matches a spelling only
// when all of the key's letters and digits are there, in order (base64 and
// base32 forms spare only the one or two edge characters that mix in the
// bytes around the key): a prefix, a half, every character but the last of
// a hex spelling is never replaced, so the answer does not grow with what
// a caller has right, and the key cannot be learnt piece by piece. Its
// prefilter and its comparison are keyed and constant in time for the same
// reason (Redactor). What is left is guessing the key whole, a spelling
// per guess, within maxScrubBytesPerMessage a message: hopeless for an API
// key; a value of a few characters is guessable by anyone anyway.
//
// Bounded like every relay route: the body within agent.MaxScrubBytes
// (read under the socket's read deadline), the work linear in it, and the
// message's calls and bytes within the caps above.
func (r *Relay) serveScrub(w http.ResponseWriter, req *http.Request, s *relaySession, refuse func(int, string)) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, agent.MaxScrubBytes))
	if err != nil {
		refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf("scrub: text over %d bytes", agent.MaxScrubBytes))
		return
	}
	s.mu.Lock()
	over := s.scrubCalls >= maxScrubCallsPerMessage || s.scrubBytes+int64(len(body)) > maxScrubBytesPerMessage
	if !over {
		s.scrubCalls++
		s.scrubBytes += int64(len(body))
	}
	s.mu.Unlock()
	if over {
		refuse(http.StatusForbidden, fmt.Sprintf("scrub: this message has had its %d texts or %d bytes scrubbed", maxScrubCallsPerMessage, maxScrubBytesPerMessage))
		return
	}
	out := s.red.String(string(body))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, out)
}

// serverSideKeys are top-level request fields that make the endpoint itself
// reach the web (OpenAI's web_search_options, OpenRouter's plugins, the
// Anthropic MCP connector's mcp_servers): a sandbox without network
// (TOOL-EXEC) would get a way out through the model.
var serverSideKeys = []string{"web_search_options", "plugins", "mcp_servers"}

// modelKeys are top-level request fields that name further models for the
// endpoint to use besides model (OpenRouter's models list, LiteLLM's
// fallbacks): each could be one the owner never chose, a search model among
// them.
var modelKeys = []string{"models", "fallbacks"}

// tokenKeys are the fields that bound an answer's length, in the spellings
// the OpenAI-compatible and Anthropic endpoints read; choiceKeys ask for
// several answers to one call.
var (
	tokenKeys  = []string{"max_tokens", "max_completion_tokens", "max_output_tokens"}
	choiceKeys = []string{"n", "best_of"}
)

// relayPolicy is what a body must keep to: the session's provider, its one
// model, and the most tokens one call may ask for.
type relayPolicy struct {
	provider  string
	model     string
	maxTokens int64
}

func policyOf(s *relaySession) relayPolicy {
	return relayPolicy{provider: s.llm.Provider, model: s.llm.Model, maxTokens: s.limits.MaxTokensPerCall}
}

// relayBodyRefusal says why a model call's body is not relayed, or "". The
// body is judged field by field as written, every duplicate and every
// spelling of a name included: Go's decoder keeps the last duplicate and
// matches names case-insensitively, the endpoint may do neither.
//   - model must be there, and every model field must be the configured
//     model, exactly (a suffix such as ":online" or another vendor prefix
//     makes another model); refusing rather than rewriting keeps what
//     reaches the endpoint byte for byte what the caller sent, and tells
//     the caller plainly;
//   - none of modelKeys;
//   - at least one of tokenKeys, each an integer from 1 to the cap;
//   - each of choiceKeys absent, null or 1;
//   - stream must be absent, false or null: the answer is read whole, so
//     its usage can be counted and its size bounded;
//   - no server-side tools: a tool's type must be "function" or "custom"
//     (OpenAI) or absent or "custom" (Anthropic); web search, web fetch,
//     code execution and the like run on the provider's side with network;
//   - none of serverSideKeys.
func relayBodyRefusal(p relayPolicy, body []byte) string {
	provider := p.provider
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "the body is not a JSON object"
	}
	sawModel, sawBound := false, false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "the body is not a JSON object"
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return "the body is not a JSON object"
		}
		switch {
		case strings.EqualFold(name, "model"):
			var m string
			if json.Unmarshal(v, &m) != nil || p.model == "" || m != p.model {
				return fmt.Sprintf("model %.80s is not relayed: this agent's relay forwards only its configured model %q", v, p.model)
			}
			sawModel = true
		case foldIn(name, modelKeys):
			return fmt.Sprintf("%s is not relayed: it names models besides the agent's configured one", name)
		case foldIn(name, tokenKeys):
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil || n < 1 || n > p.maxTokens {
				return fmt.Sprintf("%s must be an integer from 1 to %d (llm.max_tokens_per_call), got %.40s", name, p.maxTokens, v)
			}
			sawBound = true
		case foldIn(name, choiceKeys):
			if t := string(bytes.TrimSpace(v)); t != "1" && t != "null" {
				return fmt.Sprintf("%s must be 1: the relay forwards one answer per call", name)
			}
		case strings.EqualFold(name, "stream"):
			if t := string(bytes.TrimSpace(v)); t != "false" && t != "null" {
				return "streaming is not relayed; send stream=false"
			}
		case strings.EqualFold(name, "tools"):
			if why := serverSideTool(provider, v); why != "" {
				return why
			}
		case foldIn(name, serverSideKeys):
			return fmt.Sprintf("%s is not relayed: the endpoint would reach the network for a sandbox", name)
		}
	}
	if _, err := dec.Token(); err != nil {
		return "the body is not a JSON object"
	}
	if dec.More() {
		return "the body is more than one JSON object"
	}
	if !sawModel {
		return fmt.Sprintf("the body names no model; this agent's relay forwards only %q", p.model)
	}
	if !sawBound {
		return fmt.Sprintf("the body bounds no answer: send max_tokens or max_completion_tokens, at most %d (llm.max_tokens_per_call)", p.maxTokens)
	}
	return ""
}

// foldIn says whether name is one of keys in any spelling Go's decoder
// would also take for it.
func foldIn(name string, keys []string) bool {
	for _, k := range keys {
		if strings.EqualFold(name, k) {
			return true
		}
	}
	return false
}

// overBudget says which budget refuses the session's next call, and why, or
// "", "". A call is let through while the spending is under the budget, so
// the one that crosses it is answered and the next is refused.
func (r *Relay) overBudget(s *relaySession) (which, why string) {
	s.mu.Lock()
	used := s.usage.InputTokens + s.usage.OutputTokens
	s.mu.Unlock()
	if used >= s.limits.MessageTokenBudget {
		return "message", fmt.Sprintf("this message has used %d tokens, its budget is %d (llm.message_token_budget)", used, s.limits.MessageTokenBudget)
	}
	if w := r.budget.used(s.limits.Window()); w >= s.limits.AgentTokenBudget {
		return "agent", fmt.Sprintf("the agent has used %d tokens in its current window of %ds, its budget is %d (llm.agent_token_budget); the window ends at most %s after it began",
			w, s.limits.AgentBudgetWindowSeconds, s.limits.AgentTokenBudget, s.limits.Window())
	}
	return "", ""
}

// serverSideTool says why a tools list holds a tool the endpoint would run
// itself, or "".
func serverSideTool(provider string, raw json.RawMessage) string {
	if t := string(bytes.TrimSpace(raw)); t == "null" {
		return ""
	}
	var tools []map[string]json.RawMessage
	if json.Unmarshal(raw, &tools) != nil {
		return "tools: want an array of objects"
	}
	for i, tool := range tools {
		for k, v := range tool {
			if !strings.EqualFold(k, "type") {
				continue
			}
			var typ string
			if json.Unmarshal(v, &typ) != nil {
				return fmt.Sprintf("tools[%d].type: want a string", i)
			}
			ok := typ == "custom" || (provider == agentspec.ProviderOpenAI && typ == "function")
			if !ok {
				return fmt.Sprintf("tools[%d] has type %.40q: server-side tools are not relayed (they would reach the network for a sandbox)", i, typ)
			}
		}
	}
	return ""
}

// relayRoute maps a relay path to the upstream path under base_url: the
// configured provider's one model endpoint, nothing else.
func relayRoute(provider, p string) (string, bool) {
	if path.Clean(p) != p {
		return "", false
	}
	switch provider {
	case agentspec.ProviderOpenAI:
		return "chat/completions", p == relayOpenAIPrefix+"chat/completions"
	case agentspec.ProviderAnthropic:
		return "v1/messages", p == relayAnthropicPrefix+"v1/messages"
	}
	return "", false
}

func relayEndpoint(provider string) string {
	switch provider {
	case agentspec.ProviderOpenAI:
		return relayOpenAIPrefix + "chat/completions"
	case agentspec.ProviderAnthropic:
		return relayAnthropicPrefix + "v1/messages"
	}
	return "(nothing)"
}

func defaultBase(provider string) string {
	if provider == agentspec.ProviderAnthropic {
		return agentspec.DefaultAnthropicBaseURL
	}
	return agentspec.DefaultOpenAIBaseURL
}

// BaseURL is the base URL the loop is given for provider: the relay's
// prefix for that wire format, on a host name the relay ignores.
func BaseURL(provider string) string {
	if provider == agentspec.ProviderAnthropic {
		return "http://" + relayHost + relayAnthropicPrefix
	}
	return "http://" + relayHost + relayOpenAIPrefix
}

// usageOf reads the token counts of a model answer (zero when it has none).
func usageOf(provider string, body []byte) (in, out int64) {
	var u struct {
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			InputTokens      int64 `json:"input_tokens"`
			OutputTokens     int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &u) != nil {
		return 0, 0
	}
	if provider == agentspec.ProviderAnthropic {
		return u.Usage.InputTokens, u.Usage.OutputTokens
	}
	return u.Usage.PromptTokens, u.Usage.CompletionTokens
}

func bounded(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Uses says whether a provider calls a model endpoint (offline does not).
func Uses(provider string) bool {
	return provider == agentspec.ProviderOpenAI || provider == agentspec.ProviderAnthropic
}
