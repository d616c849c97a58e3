package agent

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// ReplyCutMarker begins the note that ends a text FitReply cut; the note
// says how many bytes were cut.
const ReplyCutMarker = "\n…[cut by agent-run: "

// replyRoom is what FitReply leaves free under its limit for what is set
// after it (Final) and the closing newline.
const replyRoom = 64

// FitReply cuts rep's texts until its JSON fits in maxBytes bytes, so that a
// reply larger than the runner takes still reaches the caller, cut and
// saying so, instead of being refused whole. The steps (the trace: texts,
// tool inputs, outputs, errors) are cut first, all to one bound, as high
// as fits; the reply itself is cut last, and keeps as much of its start as
// fits. It reports whether it cut anything.
func FitReply(rep *Reply, maxBytes int) bool {
	limit := maxBytes - replyRoom
	size := func() int {
		raw, err := json.Marshal(rep)
		if err != nil {
			return limit + 1
		}
		return len(raw)
	}
	n := size()
	if n <= limit {
		return false
	}
	// The trace first: every step text, tool input, output and error over
	// a shrinking bound is cut to it.
	var trace []*string
	for i := range rep.Steps {
		s := &rep.Steps[i]
		trace = append(trace, &s.Text)
		for j := range s.ToolCalls {
			c := &s.ToolCalls[j]
			trace = append(trace, &c.Input, &c.Output, &c.Error)
		}
	}
	orig := make([]string, len(trace))
	for i, p := range trace {
		orig[i] = *p
	}
	setTrace := func(bound int) {
		for i, p := range trace {
			*p = cutText(orig[i], bound)
		}
		n = size()
	}
	// Without its trace the reply may still be too large: then the trace
	// goes whole. Else it keeps the most that fits, halving.
	if setTrace(0); n <= limit {
		for bound := limit / 2; bound > 0; bound /= 2 {
			if setTrace(bound); n <= limit {
				break
			}
		}
		if n > limit {
			setTrace(0)
		}
	}
	// Then the reply: first to the room left (JSON escaping can make it
	// larger than its bytes), halving until it fits.
	reply := rep.Reply
	for bound := len(reply) - (n - limit) - 2*len(ReplyCutMarker); n > limit; bound /= 2 {
		rep.Reply = cutText(reply, max(bound, 0))
		n = size()
		if bound <= 0 {
			break
		}
	}
	if n > limit {
		// Only an error text this large is left: it goes too.
		rep.Error = cutText(rep.Error, 0)
	}
	return true
}

// cutText keeps at most bound bytes of s's start (whole UTF-8 characters)
// and adds the note of the cut; a text within bound is left as it is.
func cutText(s string, bound int) string {
	if len(s) <= bound {
		return s
	}
	keep := bound
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + fmt.Sprintf("%s%d bytes]", ReplyCutMarker, len(s)-keep)
}
