package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
)

// Loop limits.
const (
	// maxToolCallsPerStep bounds how many tool calls of one model turn run.
	maxToolCallsPerStep = 16
	// MaxRequestBytes bounds the stdin request.
	MaxRequestBytes = 8 << 20
	// DefaultConversation keys messages that carry no conversation id.
	DefaultConversation = "default"
)

// Environment variables that carry the API key to tool processes when
// Request.InjectCredentialsEnv is set: MEEPA_LLM_API_KEY always, plus the
// vendor's usual name for its SDKs and CLIs.
const (
	EnvLLMAPIKey       = "MEEPA_LLM_API_KEY"
	EnvOpenAIAPIKey    = "OPENAI_API_KEY"
	EnvAnthropicAPIKey = "ANTHROPIC_API_KEY"
)

// Options configure one Run. The zero value of each optional field is
// stated.
type Options struct {
	// Workspace is the agent's workspace directory (required): /workspace in
	// a container, the agent's HOME in host mode.
	Workspace string
	// Client answers instead of the one LLMConfig names; nil builds it from
	// the request (tests use this to script a model).
	Client Client
	// HTTPClient carries the LLM calls; nil is a client with no overall
	// timeout (the runner's timeout_seconds bounds the message).
	HTTPClient *http.Client
	// Logger gets structured, secret-free events; nil discards them.
	Logger hclog.Logger
	// RelayConn is the relay connection carried on agent-run's stdio
	// (Relay.Stream); nil elsewhere.
	RelayConn net.Conn
	// Prepared is Workspace made ready before the request came (Prepare);
	// Run takes it over and closes it. Nil prepares at Run.
	Prepared *Prepared
}

// RunJSON decodes one request and runs it; a malformed request still gets
// a Reply, with ErrKindRequest.
func RunJSON(ctx context.Context, data []byte, opt Options) *Reply {
	start := time.Now()
	var req Request
	var err error
	if len(data) > MaxRequestBytes {
		err = fmt.Errorf("request is %d bytes, more than the %d allowed", len(data), MaxRequestBytes)
	} else if err = json.Unmarshal(data, &req); err != nil {
		err = fmt.Errorf("decode request: %w", err)
	}
	if err != nil {
		opt.Prepared.Close(opt.Logger)
		return failed(&Reply{}, start, ErrKindRequest, err)
	}
	return Run(ctx, &req, opt)
}

func failed(rep *Reply, start time.Time, kind string, err error) *Reply {
	rep.ErrorKind = kind
	rep.Error = err.Error()
	rep.DurationMS = time.Since(start).Milliseconds()
	return rep
}

// Run answers one message: it builds the system prompt from the workspace,
// talks to the model for at most max_steps turns, runs the tools the model
// asks for, keeps the exchange in memory.db and returns the Reply. It never
// returns nil; failures are a Reply with ErrorKind set.
func Run(ctx context.Context, req *Request, opt Options) *Reply {
	start := time.Now()
	log := opt.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	rep := &Reply{MessageID: req.Message.ID}

	// The one secret a request can hold (the key, or the relay's token
	// for it): what the loop writes into the workspace is always scrubbed
	// of it (Prepared.Scrub), the reply only when RedactSecrets asks.
	red := redact.NewRedactor(req.LLM.APIKey)
	finish := func(kind string, err error) *Reply {
		if err != nil {
			rep.ErrorKind = kind
			rep.Error = err.Error()
		}
		if req.RedactSecrets {
			RedactReply(red, rep)
		}
		rep.DurationMS = time.Since(start).Milliseconds()
		log.Info("message done", "message_id", req.Message.ID, "steps", len(rep.Steps),
			"error_kind", rep.ErrorKind, "duration_ms", rep.DurationMS)
		return rep
	}

	p := opt.Prepared
	if p == nil || p.err != nil || p.workspace != opt.Workspace {
		// A workspace that was not ready when the sandbox started may
		// be ready now: prepare again rather than report a stale failure.
		p.Close(log)
		p = Prepare(ctx, opt.Workspace)
	}
	defer p.Close(log)
	scrub := &scrubber{red: red}
	p.Scrub(scrub) // before anything can write, whatever fails below
	maxSteps, env, err := validate(req, opt.Workspace)
	if err != nil {
		return finish(ErrKindRequest, err)
	}
	if p.err != nil {
		return finish(ErrKindWorkspace, p.err)
	}
	tb, mem := p.tb, p.mem
	tb.env = env
	if err := tb.SetRole(req.Role); err != nil {
		return finish(ErrKindRequest, err)
	}
	defer func() { rep.ToolsRefused = tb.Refused() }()
	if req.EgressSocket != "" {
		addr, stop, err := egressPipe(req.EgressSocket)
		if err != nil {
			return finish(ErrKindInternal, err)
		}
		defer stop()
		tb.env = viaPipe(tb.env, addr)
	}
	if req.EgressCA != "" {
		ca, err := trustEgressCA(req.EgressCA, env)
		if err != nil {
			return finish(ErrKindRequest, err)
		}
		defer ca.remove()
		tb.env, tb.roots = append(tb.env, ca.env...), ca.roots
	}
	tb.brokered = req.Brokered

	hc := opt.HTTPClient
	if req.Relay != nil {
		tr, closeRelay, err := relayTransport(req.Relay, opt.RelayConn)
		if err != nil {
			return finish(ErrKindRequest, err)
		}
		defer closeRelay()
		hc = &http.Client{Transport: tr}
		// With a relay, req.LLM.APIKey is the message's token: the real key
		// is the runner's, and so is finding it in what the loop writes.
		scrub.remote = relayScrub(tr, req.LLM.APIKey)
		if len(req.Asks) > 0 {
			tb.ask, tb.asks = asker(tr, req.LLM.APIKey), req.Asks
		}
		if req.InjectCredentialsEnv && usesModel(req.LLM.Provider) {
			// Tools get the relay and this message's token, never the key.
			base, stop, err := relayForwarder(tr)
			if err != nil {
				log.Warn("no relay for tools", "error", err)
			} else {
				defer stop()
				// Appended last: exec keeps the last of duplicate names, so
				// an env entry cannot point tools elsewhere.
				tb.env = append(tb.env, relayEnv(req.LLM.Provider, base, req.LLM.APIKey)...)
			}
		}
	}
	if err := applySeed(ctx, req.Seed, opt.Workspace, scrub, log); err != nil {
		return finish(ErrKindWorkspace, err)
	}

	client := opt.Client
	if client == nil {
		client, err = NewClient(req.LLM, hc)
		if err != nil {
			return finish(ErrKindRequest, err)
		}
	}
	conversation := req.Message.ConversationID
	if conversation == "" {
		conversation = DefaultConversation
	}
	var msgs []ChatMessage
	if req.LLM.Provider != agentspec.ProviderOffline {
		if msgs, err = mem.History(ctx, conversation, historyMessages); err != nil {
			return finish(ErrKindWorkspace, err)
		}
	}
	msgs = append(msgs, ChatMessage{Role: RoleUser, Text: req.Message.Text})
	completion := Completion{System: SystemPrompt(tb.Root(), tb.Dir()), Tools: tb.Specs()}

	final, done := "", false
	for step := 0; step < maxSteps && !done; step++ {
		if ctx.Err() != nil {
			return finish(ErrKindInternal, fmt.Errorf("cancelled before step %d: %w", step+1, ctx.Err()))
		}
		completion.Messages = msgs
		ans, err := client.Complete(ctx, completion)
		if err != nil {
			if ctx.Err() != nil {
				return finish(ErrKindInternal, fmt.Errorf("cancelled during step %d: %w", step+1, ctx.Err()))
			}
			return finish(ErrKindLLM, err)
		}
		rep.Usage.InputTokens += ans.Usage.InputTokens
		rep.Usage.OutputTokens += ans.Usage.OutputTokens
		st := Step{Text: ans.Text}
		if len(ans.ToolCalls) == 0 {
			rep.Steps = append(rep.Steps, st)
			final, done = ans.Text, true
			break
		}
		msgs = append(msgs, ChatMessage{Role: RoleAssistant, Text: ans.Text, ToolCalls: ans.ToolCalls})
		results := make([]ToolResult, 0, len(ans.ToolCalls))
		for i, use := range ans.ToolCalls {
			t0 := time.Now()
			var res ToolResult
			if i < maxToolCallsPerStep {
				res = tb.Run(ctx, use)
			} else {
				// Every call still needs a result: the APIs reject a turn
				// that leaves one unanswered.
				res = ToolResult{ID: use.ID, Name: use.Name, Error: fmt.Sprintf("not run: at most %d tool calls per step", maxToolCallsPerStep)}
			}
			log.Debug("tool", "name", use.Name, "error", res.IsError(), "duration_ms", time.Since(t0).Milliseconds())
			st.ToolCalls = append(st.ToolCalls, ToolCall{
				Name: use.Name, Input: string(use.Input), Output: res.Content, ExitCode: res.ExitCode, Error: res.Error,
			})
			if req.RedactSecrets {
				// The model's provider need not see secrets a tool printed.
				res.Content, res.Error = red.String(res.Content), red.String(res.Error)
			}
			results = append(results, res)
		}
		rep.Steps = append(rep.Steps, st)
		msgs = append(msgs, ChatMessage{Role: RoleTool, ToolResults: results})
	}
	if !done {
		return finish(ErrKindSteps, fmt.Errorf("no final answer after %d steps (max_steps)", maxSteps))
	}
	rep.Reply = final
	if err := mem.Append(ctx, conversation, req.Message.ID, req.Message.Text, final); err != nil {
		return finish(ErrKindWorkspace, err)
	}
	return finish("", nil)
}

// validate checks the request and builds the tool processes' environment.
func validate(req *Request, workspace string) (int, []string, error) {
	var errs []error
	if workspace == "" {
		errs = append(errs, errors.New("no workspace directory given"))
	}
	if req.Message.Text == "" {
		errs = append(errs, errors.New("message.text is empty"))
	}
	known := false
	for _, p := range agentspec.Providers {
		known = known || req.LLM.Provider == p
	}
	if !known {
		errs = append(errs, fmt.Errorf("llm.provider %q is not one of %v", req.LLM.Provider, agentspec.Providers))
	}
	maxSteps := req.MaxSteps
	switch {
	case maxSteps == 0:
		maxSteps = agentspec.DefaultMaxSteps
	case maxSteps < 0 || maxSteps > agentspec.MaxMaxSteps:
		errs = append(errs, fmt.Errorf("max_steps %d is not between 1 and %d", maxSteps, agentspec.MaxMaxSteps))
	}
	env, err := toolEnv(req, workspace)
	if err != nil {
		errs = append(errs, err)
	}
	return maxSteps, env, errors.Join(errs...)
}

// toolEnv is the whole environment of tool processes: PATH, HOME (the
// workspace) and TMPDIR, then the request's Env, then the bound secrets'
// placeholders, then the API key when InjectCredentialsEnv. agent-run's
// own environment is not inherited, so nothing the runner had reaches a
// tool by accident.
func toolEnv(req *Request, workspace string) ([]string, error) {
	env := map[string]string{
		"PATH":   getenvOr("PATH", "/usr/local/bin:/usr/bin:/bin"),
		"HOME":   workspace,
		"TMPDIR": getenvOr("TMPDIR", "/tmp"),
	}
	var errs []error
	set := func(field, k, v string) {
		if err := agentspec.CheckToolEnvName(k); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
			return
		}
		for _, c := range v {
			if c == 0 {
				errs = append(errs, fmt.Errorf("%s: the value of %s contains a NUL byte", field, k))
				return
			}
		}
		env[k] = v
	}
	for k, v := range req.Env {
		set("env", k, v)
	}
	for _, b := range req.Brokered {
		set("secret_bindings", b.Name, b.Placeholder)
	}
	// With a relay the "key" is the relay token and tools get it with the
	// relay's address, once the loop has it (relayEnv).
	if req.InjectCredentialsEnv && req.LLM.APIKey != "" && req.Relay == nil {
		set("llm.api_key", EnvLLMAPIKey, req.LLM.APIKey)
		switch req.LLM.Provider {
		case agentspec.ProviderOpenAI:
			set("llm.api_key", EnvOpenAIAPIKey, req.LLM.APIKey)
		case agentspec.ProviderAnthropic:
			set("llm.api_key", EnvAnthropicAPIKey, req.LLM.APIKey)
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, errors.Join(errs...)
}

func usesModel(provider string) bool {
	return provider == agentspec.ProviderOpenAI || provider == agentspec.ProviderAnthropic
}

// relayEnv points tool processes at the relay forwarder on base with the
// message's token, in the variables the vendors' SDKs read.
func relayEnv(provider, base, token string) []string {
	env := []string{EnvLLMAPIKey + "=" + token}
	switch provider {
	case agentspec.ProviderOpenAI:
		env = append(env, EnvLLMBaseURL+"="+base+"/openai", EnvOpenAIBaseURL+"="+base+"/openai", EnvOpenAIAPIKey+"="+token)
	case agentspec.ProviderAnthropic:
		env = append(env, EnvLLMBaseURL+"="+base+"/anthropic", EnvAnthropicBaseURL+"="+base+"/anthropic", EnvAnthropicAPIKey+"="+token)
	}
	return env
}

func getenvOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// checkWorkspace fails clearly when the workspace cannot hold memory.db:
// missing, not a directory, or not writable by this uid (a bind mount owned
// by another uid, a read-only mount). SQLite would otherwise open an
// existing database read-only without complaint and fail only at the end.
func checkWorkspace(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("workspace %s is not a directory", dir)
	}
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return fmt.Errorf("workspace %s is not writable by uid %d: %w", dir, os.Getuid(), err)
	}
	db := filepath.Join(dir, MemoryFile)
	if _, err := os.Lstat(db); err == nil {
		if err := syscall.Access(db, 2 /* W_OK */); err != nil {
			return fmt.Errorf("%s is not writable by uid %d: %w", db, os.Getuid(), err)
		}
	}
	return nil
}

// NewClient builds the client LLMConfig names.
func NewClient(cfg agentspec.LLMConfig, hc *http.Client) (Client, error) {
	switch cfg.Provider {
	case agentspec.ProviderOffline:
		return Offline{}, nil
	case agentspec.ProviderOpenAI:
		return NewOpenAI(cfg, hc)
	case agentspec.ProviderAnthropic:
		return NewAnthropic(cfg, hc)
	}
	return nil, fmt.Errorf("llm.provider %q is not one of %v", cfg.Provider, agentspec.Providers)
}
