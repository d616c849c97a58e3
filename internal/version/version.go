// Package version holds the build's identity. Both binaries, the provider and
// agent-runner, read it, and the GNUmakefile sets it with -ldflags -X so the
// version recorded in Terraform state and the one printed by
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

// String is the one-line form printed by `agent-runner version`.
func String() string {
	return fmt.Sprintf("agent-runner %s (commit %s, %s/%s)", Version, Commit, runtime.GOOS, runtime.GOARCH)
}
