// Package version holds the build's identity. Both binaries, the provider and
// agent-runner, read it, and the GNUmakefile and .goreleaser.yaml set it with
// the same -ldflags -X, so the version recorded in Terraform state, the one a
// running runner reports on /healthz and the one printed by
// `agent-runner version` come from one place.
package version

import (
	"fmt"
	"runtime"
)

var (
	// Version is the release version, e.g. "0.1.0".
	Version = "0.1.0-dev"
	// Commit is the short git commit the binary was built from.
	Commit = "unknown"
)

// Info is a build's identity: two binaries with equal Info were built from
// the same source by the same release.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
}

// Current is this binary's identity.
func Current() Info { return Info{Version: Version, Commit: Commit} }

// String is "0.1.0 (commit abc1234)".
func (i Info) String() string { return fmt.Sprintf("%s (commit %s)", i.Version, i.Commit) }

// Line is the one-line form a binary prints for its version flag or
// subcommand: "<program> 0.1.0 (commit abc1234, linux/amd64)".
func Line(program string) string {
	return fmt.Sprintf("%s %s (commit %s, %s/%s)", program, Version, Commit, runtime.GOOS, runtime.GOARCH)
}

// String is the one-line form printed by `agent-runner version`.
func String() string { return Line("agent-runner") }
