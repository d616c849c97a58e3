// Package deploy runs an agent's `agent-runner serve` service: its files
// under the state directory (the 0600 config, the socket directory, a hash
// key) and its service container. Exactly one runner exists per agent: the
// container's name is derived from the agent id, and Docker refuses a second
// container of the same name, so two runners of one agent cannot coexist even
// while one replaces the other.
package deploy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// Layout is where a runner's files live: outside the agent's workspace, so
// the agent (which can write its whole workspace) never sees its own config,
// token or keys.
type Layout struct {
	// Dir is <state_dir>/runners/<agent_id>, mode 0700.
	Dir string
	// ConfigFile is Dir/config.json, mode 0600: the agentspec.Config with the
	// token, the API key and the secrets.
	ConfigFile string
	// SocketDir is Dir/run, where the unix listener lives by default; it is
	// the only directory of the runner's that its container may write.
	SocketDir string
	// Socket is the default unix socket, SocketDir/runner.sock.
	Socket string
	// JournalDir is Dir/journal, mode 0700: the runner's record of every
	// message it accepted until it is answered (agentspec.Config.Journal). It
	// holds message text and replies; the runner's container mounts it
	// read-write, and no sandbox ever sees it.
	JournalDir string
	// HashKeyFile keys the hash of the secrets inside config_hash (see
	// ConfigHash), so the hash in Terraform state cannot be used to guess a
	// secret.
	HashKeyFile string
	// EmptyFile is Dir/empty, an empty read-only file: in host mode it is
	// mounted over each denied file inside an allowed tree (see Cover).
	EmptyFile string
}

// LayoutFor is the layout of an agent's runner under a state directory.
func LayoutFor(stateDir, agentID string) Layout {
	dir := filepath.Join(stateDir, "runners", agentID)
	return Layout{
		Dir:         dir,
		ConfigFile:  filepath.Join(dir, "config.json"),
		SocketDir:   filepath.Join(dir, "run"),
		Socket:      filepath.Join(dir, "run", "runner.sock"),
		JournalDir:  filepath.Join(dir, "journal"),
		HashKeyFile: filepath.Join(dir, "hash.key"),
		EmptyFile:   filepath.Join(dir, "empty"),
	}
}

// Prepare makes the runner's directories (0700), its empty file and its
// hash key when missing, and returns the key.
func Prepare(l Layout) ([]byte, error) {
	for _, d := range []string{filepath.Dir(l.Dir), l.Dir, l.SocketDir, l.JournalDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("runner dir: %w", err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("runner dir: %w", err)
		}
	}
	if err := os.WriteFile(l.EmptyFile, nil, 0o444); err != nil && !errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("runner files: %w", err)
	}
	key, err := ReadHashKey(l)
	if err == nil {
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("hash key: %w", err)
	}
	if err := os.WriteFile(l.HashKeyFile, []byte(hex.EncodeToString(key)), 0o600); err != nil {
		return nil, fmt.Errorf("hash key: %w", err)
	}
	return key, nil
}

// ReadHashKey reads the key Prepare made; fs.ErrNotExist when there is none.
func ReadHashKey(l Layout) ([]byte, error) {
	raw, err := os.ReadFile(l.HashKeyFile)
	if err != nil {
		return nil, fmt.Errorf("hash key: %w", err)
	}
	key, err := hex.DecodeString(string(raw))
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("hash key %s: malformed", l.HashKeyFile)
	}
	return key, nil
}

// WriteConfig writes the runner's config file, 0600, atomically.
func WriteConfig(l Layout, c *agentspec.Config) error {
	return agentspec.WriteConfig(l.ConfigFile, c)
}

// RemoveFiles deletes the runner's directory: config, key, socket, journal.
func RemoveFiles(l Layout) error {
	// As workspace.Remove does: only <state_dir>/runners/<agent_id>, so a
	// bad agent id or state can never make it delete elsewhere.
	if !filepath.IsAbs(l.Dir) || filepath.Base(filepath.Dir(l.Dir)) != "runners" || !workspace.ValidID(filepath.Base(l.Dir)) {
		return fmt.Errorf("runner files: refusing to remove %q: not <state_dir>/runners/<agent_id>", l.Dir)
	}
	if err := os.RemoveAll(l.Dir); err != nil {
		return fmt.Errorf("runner files: %w", err)
	}
	return nil
}
