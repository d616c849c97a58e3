// Package sandbox runs one agent message in a fresh, isolated sandbox: a
// hardened per-message container (the Docker backend) or a Landlock-restricted
// child process on the host (the host backend).
package sandbox

import (
	"context"
	"net"
	"os"
	"time"
)

// Job is one message to run.
type Job struct {
	MessageID string
	// Stdin is the agent-run request JSON; it holds secrets, so it is never
	// logged or written to disk.
	Stdin   []byte
	Timeout time.Duration
	// Files are inherited by a host-mode child from fd 4 on (fd 3 is the
	// Landlock rules): the LLM relay's connected socket. The caller owns
	// and closes them. The Docker backend ignores them.
	Files []*os.File
	// Relay, when set, serves the LLM relay on a connection the backend
	// carries on the sandbox's own stdio (the pod backend: package podio)
	// until the returned stop is called. Other backends ignore it.
	Relay func(net.Conn) (stop func())
}

// Outcome is what the sandbox did. Run returns an error only when the sandbox
// could not be made or driven; a sandbox that ran and failed is an Outcome.
type Outcome struct {
	// SandboxID is the container id, or "pid:<n>" for the host backend.
	SandboxID string
	ImageID   string
	Stdout    []byte
	// StderrTail is the last few KiB of stderr, for diagnosis.
	StderrTail []byte
	ExitCode   int
	OOMKilled  bool
	TimedOut   bool
	// StartLatency is from the request to the sandbox running (zero when a
	// prestarted sandbox was used).
	StartLatency time.Duration
}

// Backend runs messages for one agent. The runner serialises calls to Run
// per agent (the spec's per-agent mutex); a Backend need not.
type Backend interface {
	Run(ctx context.Context, job Job) (Outcome, error)
	// Ready reports whether the next Run can start without waiting for a
	// sandbox to be made (a prestarted container is waiting).
	Ready() bool
	// Close releases what the backend holds (a prestarted container).
	Close(ctx context.Context) error
}
