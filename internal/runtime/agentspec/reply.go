package agentspec

import (
	"bytes"
	"encoding/json"
)

// MaxReplyBytes bounds the reply document agent-run writes on stdout (its
// JSON line, newline included). The runner reads no more than this from a
// sandbox and refuses a reply that is longer, so it must stay well under
// the runner's own memory: the runner holds a few copies of a reply while
// it answers, redacts and journals it.
const MaxReplyBytes = 4 << 20

// FinalReply reports whether stdout, as far as it has come, is exactly one
// complete reply line marked final. The runner answers such a reply at
// once; anything else (no newline yet, more than one line, not a reply,
// not final) waits for the sandbox's exit state as before. Final only
// shortens the wait: the sandbox still waits for the container's exit
// before any later message reaches another container. Both sandbox
// backends read it, which is why it lives here and not beside the loop.
func FinalReply(stdout []byte) bool {
	line, rest, ok := bytes.Cut(stdout, []byte{'\n'})
	if !ok || len(bytes.TrimSpace(rest)) != 0 {
		return false
	}
	var r struct {
		Final bool `json:"final"`
	}
	return json.Unmarshal(line, &r) == nil && r.Final
}
