package landlock

import (
	"encoding/json"
	"fmt"
	"io"
)

// ChildConfig is what the host backend hands the restricted child (on a
// pipe, fd 3) before the child reads its request. The child applies it to
// itself and then execs the agent loop.
type ChildConfig struct {
	// Ruleset is nil for an unrestricted agent (file_access.unrestricted or
	// serve --unrestricted): rlimits only.
	Ruleset *Ruleset `json:"ruleset,omitempty"`
	// DataLimit is RLIMIT_DATA in bytes (0: unlimited). See the host
	// backend for why RLIMIT_DATA and not RLIMIT_AS.
	DataLimit uint64 `json:"data_limit,omitempty"`
	// NProc is RLIMIT_NPROC (0: unchanged); the backend sets it when no
	// pids cgroup is available.
	NProc uint64 `json:"nproc,omitempty"`
	// User is the dedicated uid and gid the child becomes before it
	// restricts itself (nil: it keeps the runner's). Needs CAP_SETUID and
	// CAP_SETGID, which the child then loses with the rest.
	User *ChildUser `json:"user,omitempty"`
	// EmptyFile is a read-only empty regular file the child bind-mounts
	// over the denied files of Ruleset.Hide (directories get a tmpfs).
	EmptyFile string `json:"empty_file,omitempty"`
}

// ChildUser is a numeric uid and gid, and the supplementary groups the
// child keeps (none but those listed).
type ChildUser struct {
	UID    int   `json:"uid"`
	GID    int   `json:"gid"`
	Groups []int `json:"groups,omitempty"`
}

// ChildErrorPrefix starts the stderr line of a child that could not
// restrict itself; it then exits with ChildErrorExit. The backend turns
// that into a sandbox error, never into a run without rules.
const (
	ChildErrorPrefix = "meepa-sandbox-error: "
	ChildErrorExit   = 125
)

// ReadChildConfig decodes the config from r (at most 16 MiB).
func ReadChildConfig(r io.Reader) (*ChildConfig, error) {
	raw, err := io.ReadAll(io.LimitReader(r, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read child config: %w", err)
	}
	var c ChildConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("decode child config: %w", err)
	}
	return &c, nil
}
