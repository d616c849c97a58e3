package proxy

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Decisions recorded in the audit log.
const (
	DecisionAllow = "allow" // the policy allowed it and the upstream answered
	DecisionDeny  = "deny"  // the policy refused it (403) or the request was malformed (400)
	DecisionError = "error" // the policy allowed it but the upstream failed (502)
	// DecisionRevoke: a runner ended a message's credential; the reason
	// gives the message's counts.
	DecisionRevoke = "revoke"
)

// AuditRecord is one line of the audit log, written when a request ends.
// It never holds request bodies, paths, queries or headers: those can carry
// credentials.
type AuditRecord struct {
	Time   string `json:"time"` // RFC 3339 with nanoseconds, UTC, when the request arrived
	Client string `json:"client"`
	// Agent, Role and Message come from the request's egress credential,
	// once its MAC holds; empty on a proxy without a key, or a request
	// without a verifiable credential.
	Agent      string  `json:"agent,omitempty"`
	Role       string  `json:"role,omitempty"`
	Message    string  `json:"message_id,omitempty"`
	Method     string  `json:"method"`
	Host       string  `json:"host"`
	Port       uint16  `json:"port"`
	IP         string  `json:"ip,omitempty"` // the address actually connected to (or refused)
	Decision   string  `json:"decision"`
	Reason     string  `json:"reason"`
	Status     int     `json:"status"`
	BytesUp    int64   `json:"bytes_up"`   // client to upstream: tunnel bytes, or the request body
	BytesDown  int64   `json:"bytes_down"` // upstream to client: tunnel bytes, or the response body
	DurationMS float64 `json:"duration_ms"`
	// Brokered names the secrets the proxy put into this tunnel's requests
	// (names only, never values).
	Brokered []string `json:"brokered,omitempty"`
}

// auditLog serializes records as JSON lines; one write per line so lines
// from concurrent requests never interleave.
type auditLog struct {
	mu sync.Mutex
	w  io.Writer
}

func (a *auditLog) write(rec AuditRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	_, err = a.w.Write(b)
	return err
}

func durationMS(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}
