// Package sandbox runs one agent message in a fresh, isolated sandbox: a
// hardened per-message container (the Docker backend) or a Landlock-restricted
// child process on the host (the host backend).
package sandbox

import (
	"context"
	"time"
)

// Job is one message to run; every backend reads each of its fields. How
// a sandbox reaches the runner's LLM relay is the backend's own (its
// options and RelayLink), not the job's.
type Job struct {
	MessageID string
	// Stdin is the agent-run request JSON; it holds secrets, so it is never
	// logged or written to disk.
	Stdin   []byte
	Timeout time.Duration
}

// RelayLink is how a backend's sandboxes reach the runner's LLM relay,
// which the runner tells agent-run in its request (agent.Relay). Each
// backend has one, so that the runner asks the backend, never which
// backend it has.
type RelayLink int

const (
	// RelayMounted: the relay's unix socket in Spec.RelayDir, bind-mounted
	// at RelayMountDir (the Docker backend).
	RelayMounted RelayLink = iota + 1
	// RelayInherited: one end of a socketpair made for the message
	// (HostOptions.RelayPair), inherited by the child from fd 4 (the host
	// backend).
	RelayInherited
	// RelayAttached: a stream carried on the sandbox's own stdio (the pod
	// backend, package podio).
	RelayAttached
)

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
	// RelayLink is how this backend's sandboxes reach the LLM relay.
	RelayLink() RelayLink
}
