// Package workspace manages an agent's persistent workspace on the host,
// <state_dir>/agents/<agent_id>/: SOUL.md, MEMORY.md, skills/, and whatever
// the agent writes there (memory.db, files). The agent owns its contents:
// this package creates what is missing and otherwise leaves the agent's edits
// alone, except SOUL.md when the caller manages it.
package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
)

// File and directory names inside a workspace.
const (
	SoulFile   = "SOUL.md"
	MemoryFile = "MEMORY.md"
	SkillsDir  = "skills"
)

// DirMode is the workspace's mode: only its owner (the agent's sandbox user,
// or the provider's user) may enter it.
const DirMode fs.FileMode = 0o700

// fileMode is the mode of the files this package writes.
const fileMode fs.FileMode = 0o600

// idPattern is what an agent id may look like: it becomes a directory name
// and part of container names, so no separators, no dots, no upper case.
var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// IDPattern is idPattern's source, for validators and docs.
const IDPattern = `^[a-z0-9][a-z0-9_-]{0,62}$`

// ValidID reports whether id can name an agent.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// Path is the workspace directory of an agent under a state directory.
func Path(stateDir, agentID string) string {
	return filepath.Join(stateDir, "agents", agentID)
}

// Spec says what a workspace should hold.
type Spec struct {
	// Dir is the workspace directory (see Path).
	Dir string
	// Soul and Memory are the initial SOUL.md and MEMORY.md.
	Soul   string
	Memory string
	// ManageSoul keeps SOUL.md equal to Soul, overwriting the agent's edits.
	// Without it SOUL.md is written only when missing.
	ManageSoul bool
	// Owner, when set, is the uid:gid that must be able to write the
	// workspace (the per-message sandbox's user). It is applied to what this
	// package creates; it needs the right to chown, so it is skipped with an
	// error when the caller lacks it.
	Owner *Owner
	// Mounted says Dir is a volume someone else mounted for the caller (a
	// message pod's /workspace, agent-run's seed on a cluster): it must
	// exist, and Ensure neither makes it nor changes its mode. The mode of
	// a mount point is the volume's: with a pod's fsGroup the kubelet
	// gives the group access (and the setgid bit, so new files keep the
	// group) on a directory the pod's user may not own, where a chmod
	// fails with EPERM, or, where it is the owner, would strip the group
	// access the next pod's user may rely on. Nothing outside the pod sees
	// the mount point, so 0700's reason (other users of a host listing
	// agents) does not apply there.
	Mounted bool
}

// Owner is a numeric user and group.
type Owner struct{ UID, GID int }

// Result says what Ensure did.
type Result struct {
	// Created is true when the workspace directory did not exist before.
	Created bool
	// SoulWritten is true when SOUL.md was (re)written.
	SoulWritten bool
}

// Ensure makes the workspace hold what s says without destroying the agent's
// work: the directory (mode 0700, parents 0700 too, so other users cannot
// list agents), SOUL.md and MEMORY.md when missing, skills/ when missing;
// SOUL.md is rewritten only with ManageSoul and only when it differs. A
// Mounted directory must exist and keeps its mode.
func Ensure(s Spec) (Result, error) {
	var r Result
	if s.Dir == "" || !filepath.IsAbs(s.Dir) {
		return r, fmt.Errorf("workspace: %q is not an absolute path", s.Dir)
	}
	if s.Mounted {
		// Stat, not Lstat: a mount point is what it resolves to, and the
		// caller (not the agent) chose the path.
		if st, err := os.Stat(s.Dir); err != nil {
			return r, fmt.Errorf("workspace: %w", err)
		} else if !st.IsDir() {
			return r, fmt.Errorf("workspace: %s is not a directory", s.Dir)
		}
		err := ensureFiles(s, &r, nil)
		return r, err
	}
	if _, err := os.Lstat(s.Dir); errors.Is(err, fs.ErrNotExist) {
		r.Created = true
	} else if err != nil {
		return r, fmt.Errorf("workspace: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(s.Dir), DirMode); err != nil {
		return r, fmt.Errorf("workspace parent: %w", err)
	}
	if err := os.Mkdir(s.Dir, DirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return r, fmt.Errorf("workspace: %w", err)
	}
	st, err := os.Lstat(s.Dir)
	if err != nil {
		return r, fmt.Errorf("workspace: %w", err)
	}
	// A symlink here could point the agent's bind mount anywhere on the host.
	if !st.IsDir() {
		return r, fmt.Errorf("workspace: %s exists and is not a directory", s.Dir)
	}
	if st.Mode().Perm() != DirMode {
		if err := os.Chmod(s.Dir, DirMode); err != nil {
			return r, fmt.Errorf("workspace chmod: %w", err)
		}
	}
	var created []string
	if r.Created {
		created = append(created, s.Dir)
	}
	err = ensureFiles(s, &r, created)
	return r, err
}

// ensureFiles writes what Ensure promises inside the existing directory
// s.Dir, reports it in *r, and chowns to s.Owner what was made (created
// holds what Ensure made before).
func ensureFiles(s Spec, r *Result, created []string) error {
	wrote, err := writeIfMissing(filepath.Join(s.Dir, SoulFile), s.Soul)
	if err != nil {
		return err
	}
	r.SoulWritten = wrote
	if wrote {
		created = append(created, filepath.Join(s.Dir, SoulFile))
	} else if s.ManageSoul {
		cur, present, err := readSoul(s.Dir)
		if err != nil {
			return err
		}
		if !present || cur != s.Soul {
			if err := writeAtomic(s.Dir, SoulFile, s.Soul); err != nil {
				return err
			}
			r.SoulWritten = true
			created = append(created, filepath.Join(s.Dir, SoulFile))
		}
	}
	if wrote, err := writeIfMissing(filepath.Join(s.Dir, MemoryFile), s.Memory); err != nil {
		return err
	} else if wrote {
		created = append(created, filepath.Join(s.Dir, MemoryFile))
	}
	skills := filepath.Join(s.Dir, SkillsDir)
	if err := os.Mkdir(skills, DirMode); err == nil {
		created = append(created, skills)
	} else if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("workspace skills: %w", err)
	}

	if s.Owner != nil {
		// The top directory always (unless it is a mount point, whose
		// owner is the volume's), so a changed sandbox user can still
		// enter it; below it only what was made now, never the agent's own
		// files (it may have chosen their owners).
		if !r.Created && !s.Mounted {
			created = append(created, s.Dir)
		}
		for _, p := range created {
			if err := os.Lchown(p, s.Owner.UID, s.Owner.GID); err != nil {
				return fmt.Errorf("workspace chown %s to %d:%d: %w", p, s.Owner.UID, s.Owner.GID, err)
			}
		}
	}
	return nil
}

func writeIfMissing(p, content string) (bool, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("workspace: %w", err)
	}
	_, werr := f.WriteString(content)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return false, fmt.Errorf("workspace write %s: %w", filepath.Base(p), werr)
	}
	return true, nil
}

// writeAtomic replaces dir/name, keeping its owner, so the agent never reads
// a half-written file. The agent can write its workspace (even while this
// runs), so nothing here follows a name it could have planted: the temporary
// file is created O_EXCL under a random name, and the rename replaces a
// symlink at name rather than writing through it.
func writeAtomic(dir, name, content string) (err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("workspace write %s: %w", name, err)
	}
	defer func() { _ = root.Close() }() // a directory handle: nothing to lose
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := name + ".meepa-tmp-" + hex.EncodeToString(rnd[:])
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return fmt.Errorf("workspace write %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			_ = root.Remove(tmp)
		}
	}()
	_, werr := f.WriteString(content)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("workspace write %s: %w", name, werr)
	}
	if st, err := root.Lstat(name); err == nil {
		if o, ok := statOwner(st); ok {
			_ = root.Lchown(tmp, o.UID, o.GID)
		}
	}
	if err := root.Rename(tmp, name); err != nil {
		return fmt.Errorf("workspace write %s: %w", name, err)
	}
	return nil
}

// readSoul reads dir/SOUL.md when it is a regular file. The agent owns its
// workspace and could make SOUL.md a symlink to the runner's config or any
// host file the provider can read (Inspect's content lands in Terraform
// state and plans), or a FIFO that blocks the provider: anything but a
// regular file inside the workspace reads as absent, which a managed soul
// then replaces.
func readSoul(dir string) (string, bool, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", false, fmt.Errorf("workspace: %w", err)
	}
	defer func() { _ = root.Close() }() // a directory handle: nothing to lose
	if fi, err := root.Lstat(SoulFile); errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.Mode().IsRegular()) {
		return "", false, nil
	}
	// O_NOFOLLOW and O_NONBLOCK hold if it is swapped after the Lstat.
	f, err := root.OpenFile(SoulFile, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ELOOP):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("workspace: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	st, err := f.Stat()
	if err != nil {
		return "", false, fmt.Errorf("workspace: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", false, nil
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxSoulBytes))
	if err != nil {
		return "", false, fmt.Errorf("workspace: read %s: %w", SoulFile, err)
	}
	return string(raw), true, nil
}

// maxSoulBytes bounds what Inspect reads back: the agent could grow SOUL.md
// without limit, and it ends up in Terraform state.
const maxSoulBytes = 1 << 20

// State is what Inspect found.
type State struct {
	Exists bool
	// Mode is the directory's permission bits.
	Mode fs.FileMode
	// Soul is SOUL.md's content; SoulPresent tells whether it exists.
	Soul        string
	SoulPresent bool
}

// Inspect reads a workspace's state; a missing workspace is not an error.
func Inspect(dir string) (State, error) {
	var s State
	st, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("workspace: %w", err)
	}
	if !st.IsDir() {
		return s, fmt.Errorf("workspace: %s is not a directory", dir)
	}
	s.Exists = true
	s.Mode = st.Mode().Perm()
	s.Soul, s.SoulPresent, err = readSoul(dir)
	return s, err
}

// Remove deletes a workspace and everything in it; a missing one is done.
// It refuses a path that is not a directory named like an agent under an
// "agents" directory, so a bad state can never make it delete elsewhere.
func Remove(dir string) error {
	if !ValidID(filepath.Base(dir)) || filepath.Base(filepath.Dir(dir)) != "agents" || !filepath.IsAbs(dir) {
		return fmt.Errorf("workspace remove: refusing %q: not <state_dir>/agents/<agent_id>", dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("workspace remove: %w", err)
	}
	return nil
}
