package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// OfflineShellPrefix makes the offline provider run the rest of the message
// as a shell command; OfflineFetchPrefix fetches the rest as a URL;
// OfflineAskPrefix asks the agent named by the next word the rest.
const (
	OfflineShellPrefix = "!sh "
	OfflineFetchPrefix = "!fetch "
	OfflineAskPrefix   = "!ask "
)

// Offline is the embedded deterministic responder behind provider
// "offline". It is not a model and never pretends to be one; it exists so
// the product works with no API key and no network, and so tests exercise
// the real loop, tools and sandbox.
//
// Its behaviour, which is fixed:
//
//   - A message that starts with "!sh " (exactly: bang, "sh", one space)
//     makes it call the shell tool with the rest of the message as the
//     command. After the tool ran, the reply is
//     "exit <code>\n<output>", where <code> is the shell's exit code
//     (124 when the command timed out, 128+N when killed by signal N) and
//     <output> is the combined stdout and stderr, cut at 64 KiB. When the
//     shell could not run at all the reply is "error: <message>".
//   - "!fetch <url>" calls the fetch tool and "!ask <agent_id> <text>" the
//     ask tool; the reply is the tool's output, or "error: <message>" when
//     the tool failed or the agent's role does not have it.
//   - Any other message gets the reply
//     "offline: received <N> characters; the offline provider is not a model;
//     start a message with `!sh ` to run a shell command in the workspace."
//     where <N> counts Unicode code points of the message text.
//
// It reports zero tokens, ignores the system prompt and the conversation
// history, and takes one step (two with the shell tool).
type Offline struct{}

// OfflineAnswer is the fixed reply to a message without the shell prefix.
func OfflineAnswer(text string) string {
	return fmt.Sprintf("offline: received %d characters; the offline provider is not a model; "+
		"start a message with `!sh ` to run a shell command in the workspace.", utf8.RuneCountInString(text))
}

// Complete implements Client.
func (Offline) Complete(_ context.Context, c Completion) (Answer, error) {
	if len(c.Messages) == 0 {
		return Answer{}, fmt.Errorf("offline: no message")
	}
	last := c.Messages[len(c.Messages)-1]
	switch last.Role {
	case RoleTool:
		if len(last.ToolResults) == 0 {
			return Answer{}, fmt.Errorf("offline: tool turn without results")
		}
		r := last.ToolResults[0]
		switch {
		case r.ExitCode != nil:
			return Answer{Text: fmt.Sprintf("exit %d\n%s", *r.ExitCode, r.Content)}, nil
		case r.Error != "":
			return Answer{Text: "error: " + r.Error}, nil
		}
		return Answer{Text: r.Content}, nil
	case RoleUser:
		if cmd, ok := strings.CutPrefix(last.Text, OfflineShellPrefix); ok {
			input, err := json.Marshal(map[string]string{"command": cmd})
			if err != nil {
				return Answer{}, fmt.Errorf("offline: %w", err)
			}
			return Answer{ToolCalls: []ToolUse{{ID: "offline-shell-1", Name: ToolShell, Input: input}}}, nil
		}
		if u, ok := strings.CutPrefix(last.Text, OfflineFetchPrefix); ok {
			input, _ := json.Marshal(map[string]string{"url": strings.TrimSpace(u)})
			return Answer{ToolCalls: []ToolUse{{ID: "offline-fetch-1", Name: ToolFetch, Input: input}}}, nil
		}
		if rest, ok := strings.CutPrefix(last.Text, OfflineAskPrefix); ok {
			target, text, _ := strings.Cut(strings.TrimSpace(rest), " ")
			input, _ := json.Marshal(map[string]string{"agent_id": target, "text": text})
			return Answer{ToolCalls: []ToolUse{{ID: "offline-ask-1", Name: ToolAsk, Input: input}}}, nil
		}
		return Answer{Text: OfflineAnswer(last.Text)}, nil
	default:
		return Answer{}, fmt.Errorf("offline: unexpected %s turn", last.Role)
	}
}
