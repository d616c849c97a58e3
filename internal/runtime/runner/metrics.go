package runner

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The metrics are few and fixed, so they are written by hand in the
// Prometheus text format (0.0.4) rather than pulling in a client library.

// histogram is a cumulative Prometheus histogram with fixed buckets.
type histogram struct {
	bounds []float64 // upper bounds in seconds, ascending
	counts []uint64  // per bound, not cumulative; last is +Inf
	sum    float64
	n      uint64
}

func newHistogram(bounds ...float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(d time.Duration) {
	s := d.Seconds()
	i := sort.SearchFloat64s(h.bounds, s)
	h.counts[i]++
	h.sum += s
	h.n++
}

func (h *histogram) write(w *strings.Builder, name, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(w, "%s_bucket{le=%q} %d\n", name, strconv.FormatFloat(b, 'g', -1, 64), cum)
	}
	cum += h.counts[len(h.bounds)]
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, cum, name, h.sum, name, h.n)
}

type metrics struct {
	mu           sync.Mutex
	byOutcome    map[string]uint64
	latency      *histogram
	startLatency *histogram
	ooms         uint64
	timeouts     uint64
	// The LLM relay: calls by outcome, tokens by direction.
	relayCalls   map[string]uint64
	inputTokens  uint64
	outputTokens uint64
	// Calls a token budget refused, by budget (message, agent), and the
	// agent's count in its current budget window.
	budgetRefusals map[string]uint64
	agentWindowTok int64
	// Tool calls the agent's role refused.
	toolsRefused uint64

	queued   atomic.Int64 // waiting for the agent's turn
	inFlight atomic.Int64
	// Messages accepted with wait=false.
	asyncSubmitted atomic.Uint64
	// The journal: accepted messages a new runner queued again, started
	// ones it reported interrupted, and repeats of an idempotency key.
	resumed     atomic.Uint64
	interrupted atomic.Uint64
	replayed    atomic.Uint64
}

// gauges are the values /metrics reads from the rest of the server.
type gauges struct {
	ready          bool
	kept           int   // finished outcomes kept for GET /v1/messages/{id}
	keptBytes      int64 // their size (see DefaultOutcomeBytes)
	journalRecords int
	journalBytes   int64
}

func newMetrics() *metrics {
	return &metrics{
		byOutcome:      map[string]uint64{},
		relayCalls:     map[string]uint64{},
		budgetRefusals: map[string]uint64{"message": 0, "agent": 0},
		latency:        newHistogram(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
		startLatency:   newHistogram(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
	}
}

// message records one finished message. ran says a sandbox was used, so its
// start latency counts.
func (m *metrics) message(outcome string, total, start time.Duration, ran bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byOutcome[outcome]++
	switch outcome {
	case "oom":
		m.ooms++
	case "timeout":
		m.timeouts++
	}
	if ran {
		m.latency.observe(total)
		m.startLatency.observe(start)
	}
}

// rejected records a request that never reached a sandbox.
func (m *metrics) rejected(outcome string) {
	m.mu.Lock()
	m.byOutcome[outcome]++
	m.mu.Unlock()
}

// Relayed records one call to the LLM relay by outcome (ok, refused,
// unauthorized, upstream_error).
func (m *metrics) Relayed(outcome string) {
	m.mu.Lock()
	m.relayCalls[outcome]++
	m.mu.Unlock()
}

// Tokens adds what a relayed model answer reported.
func (m *metrics) Tokens(in, out int64) {
	m.mu.Lock()
	m.inputTokens += uint64(max(in, 0))
	m.outputTokens += uint64(max(out, 0))
	m.mu.Unlock()
}

// BudgetRefused counts a call that a token budget refused.
func (m *metrics) BudgetRefused(which string) {
	m.mu.Lock()
	m.budgetRefusals[which]++
	m.mu.Unlock()
}

// AgentWindow sets the agent's count in its current budget window.
func (m *metrics) AgentWindow(n int64) {
	m.mu.Lock()
	m.agentWindowTok = n
	m.mu.Unlock()
}

// refusedTools adds tool calls that the agent's role refused.
func (m *metrics) refusedTools(n int) {
	m.mu.Lock()
	m.toolsRefused += uint64(max(n, 0))
	m.mu.Unlock()
}

// write renders the metrics in the Prometheus text format; built in memory
// and written once, so a failed write is one error to handle.
func (m *metrics) write(out io.Writer, g gauges) error {
	var w strings.Builder
	m.mu.Lock()
	const p = "meepa_runner_"
	fmt.Fprintf(&w, "# HELP %smessages_total Messages by outcome (ok, or the error kind).\n# TYPE %smessages_total counter\n", p, p)
	outcomes := make([]string, 0, len(m.byOutcome))
	for o := range m.byOutcome {
		outcomes = append(outcomes, o)
	}
	sort.Strings(outcomes)
	for _, o := range outcomes {
		fmt.Fprintf(&w, "%smessages_total{outcome=%q} %d\n", p, o, m.byOutcome[o])
	}
	m.latency.write(&w, p+"message_duration_seconds", "Time from the agent's turn to the reply, per message that ran.")
	m.startLatency.write(&w, p+"container_start_seconds", "Time a message waited for its sandbox to start (0 when a prestarted one was waiting).")
	fmt.Fprintf(&w, "# HELP %squeue_depth Messages waiting for the agent's turn.\n# TYPE %squeue_depth gauge\n%squeue_depth %d\n", p, p, p, m.queued.Load())
	fmt.Fprintf(&w, "# HELP %sin_flight Messages running now (0 or 1).\n# TYPE %sin_flight gauge\n%sin_flight %d\n", p, p, p, m.inFlight.Load())
	r := 0
	if g.ready {
		r = 1
	}
	fmt.Fprintf(&w, "# HELP %sprestarted_ready Whether a prestarted sandbox is waiting.\n# TYPE %sprestarted_ready gauge\n%sprestarted_ready %d\n", p, p, p, r)
	fmt.Fprintf(&w, "# HELP %sooms_total Messages whose sandbox was OOM-killed.\n# TYPE %sooms_total counter\n%sooms_total %d\n", p, p, p, m.ooms)
	fmt.Fprintf(&w, "# HELP %stimeouts_total Messages killed at timeout_seconds.\n# TYPE %stimeouts_total counter\n%stimeouts_total %d\n", p, p, p, m.timeouts)
	fmt.Fprintf(&w, "# HELP %sllm_relay_calls_total Calls to the LLM relay by outcome.\n# TYPE %sllm_relay_calls_total counter\n", p, p)
	relay := make([]string, 0, len(m.relayCalls))
	for o := range m.relayCalls {
		relay = append(relay, o)
	}
	sort.Strings(relay)
	for _, o := range relay {
		fmt.Fprintf(&w, "%sllm_relay_calls_total{outcome=%q} %d\n", p, o, m.relayCalls[o])
	}
	fmt.Fprintf(&w, "# HELP %sllm_tokens_total Tokens the model endpoint reported through the relay.\n# TYPE %sllm_tokens_total counter\n", p, p)
	fmt.Fprintf(&w, "%sllm_tokens_total{direction=\"input\"} %d\n%sllm_tokens_total{direction=\"output\"} %d\n", p, m.inputTokens, p, m.outputTokens)
	fmt.Fprintf(&w, "# HELP %sllm_budget_refusals_total Relay calls a token budget refused (llm.message_token_budget, llm.agent_token_budget).\n# TYPE %sllm_budget_refusals_total counter\n", p, p)
	fmt.Fprintf(&w, "%sllm_budget_refusals_total{budget=\"agent\"} %d\n%sllm_budget_refusals_total{budget=\"message\"} %d\n", p, m.budgetRefusals["agent"], p, m.budgetRefusals["message"])
	fmt.Fprintf(&w, "# HELP %sllm_agent_window_tokens Tokens the agent used in its current budget window, as of its last relayed call.\n# TYPE %sllm_agent_window_tokens gauge\n%sllm_agent_window_tokens %d\n", p, p, p, m.agentWindowTok)
	fmt.Fprintf(&w, "# HELP %sasync_submissions_total Messages accepted with wait=false.\n# TYPE %sasync_submissions_total counter\n%sasync_submissions_total %d\n", p, p, p, m.asyncSubmitted.Load())
	fmt.Fprintf(&w, "# HELP %sasync_outcomes_kept Finished outcomes kept for GET /v1/messages/{id} and idempotency keys.\n# TYPE %sasync_outcomes_kept gauge\n%sasync_outcomes_kept %d\n", p, p, p, g.kept)
	fmt.Fprintf(&w, "# HELP %sasync_outcomes_kept_bytes Bytes of the finished outcomes kept (their journal records), bounded by the outcome budget.\n# TYPE %sasync_outcomes_kept_bytes gauge\n%sasync_outcomes_kept_bytes %d\n", p, p, p, g.keptBytes)
	m.writeJournal(&w, g)
	fmt.Fprintf(&w, "# HELP %stool_calls_refused_total Tool calls outside the agent's role, refused.\n# TYPE %stool_calls_refused_total counter\n%stool_calls_refused_total %d\n", p, p, p, m.toolsRefused)
	m.mu.Unlock()
	// Written after the lock is let go: a slow reader of /metrics must not
	// hold up the messages and relayed calls that count into it.
	_, err := io.WriteString(out, w.String())
	return err
}

func (m *metrics) writeJournal(w *strings.Builder, g gauges) {
	const p = "meepa_runner_"
	fmt.Fprintf(w, "# HELP %sjournal_records Messages recorded in the journal (accepted, started, or done and kept).\n# TYPE %sjournal_records gauge\n%sjournal_records %d\n", p, p, p, g.journalRecords)
	fmt.Fprintf(w, "# HELP %sjournal_bytes Bytes of the journal's records.\n# TYPE %sjournal_bytes gauge\n%sjournal_bytes %d\n", p, p, p, g.journalBytes)
	fmt.Fprintf(w, "# HELP %sresumed_total Accepted messages a restarted runner took up from its journal and queued again.\n# TYPE %sresumed_total counter\n%sresumed_total %d\n", p, p, p, m.resumed.Load())
	fmt.Fprintf(w, "# HELP %sinterrupted_total Messages that had started when the runner stopped, reported interrupted and not run again.\n# TYPE %sinterrupted_total counter\n%sinterrupted_total %d\n", p, p, p, m.interrupted.Load())
	fmt.Fprintf(w, "# HELP %sidempotent_replays_total Messages whose Idempotency-Key was seen before, answered with the first message's outcome.\n# TYPE %sidempotent_replays_total counter\n%sidempotent_replays_total %d\n", p, p, p, m.replayed.Load())
}
