package agent

import (
	"encoding/json"
	"sort"
	"strings"
)

// Redacted replaces every known secret value.
const Redacted = "[REDACTED]"

// minSecretLen: shorter values would shred ordinary text ("a", "yes") and
// carry almost no secret to protect.
const minSecretLen = 4

// Redactor replaces known secret values with Redacted. It also knows each
// value's JSON-escaped spelling, since tool inputs travel as JSON text.
type Redactor struct {
	values []string
}

// NewRedactor keeps the values of at least minSecretLen bytes, longest
// first so a secret that contains another is replaced whole.
func NewRedactor(values ...string) *Redactor {
	seen := map[string]bool{}
	var keep []string
	add := func(v string) {
		if len(v) >= minSecretLen && !seen[v] {
			seen[v] = true
			keep = append(keep, v)
		}
	}
	for _, v := range values {
		add(v)
		if b, err := json.Marshal(v); err == nil {
			add(string(b[1 : len(b)-1]))
		}
	}
	sort.Slice(keep, func(i, j int) bool { return len(keep[i]) > len(keep[j]) })
	return &Redactor{values: keep}
}

// String returns s with every known secret value replaced.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	for _, v := range r.values {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, Redacted)
		}
	}
	return s
}

// Reply scrubs every text field of a reply in place.
func (r *Redactor) Reply(rep *Reply) {
	rep.Reply = r.String(rep.Reply)
	rep.Error = r.String(rep.Error)
	for i := range rep.Steps {
		st := &rep.Steps[i]
		st.Text = r.String(st.Text)
		for j := range st.ToolCalls {
			tc := &st.ToolCalls[j]
			tc.Input = r.String(tc.Input)
			tc.Output = r.String(tc.Output)
			tc.Error = r.String(tc.Error)
		}
	}
}
