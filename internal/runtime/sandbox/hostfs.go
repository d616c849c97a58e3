package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

// AgentsGID is the one group every host-mode agent's process has besides
// its own: <state_dir> and agents/ grant it search (mode 0710), so an
// agent reaches its workspace while nobody else on the host (nobody, other
// users) may even pass through them. It lies just below the derived uids,
// so no agent's own uid or gid is it.
const AgentsGID = agentspec.AgentUIDBase - 1

// HoldStateDir keeps dir, one of the state directory's own directories
// (<state_dir>, agents/, runners/), closed to the rest of the host: nothing
// for others, and for its group search alone, and only when that group is
// AgentsGID. grant gives AgentsGID that search (a root host-mode runner
// does, for its agent's way to its workspace); without it an existing
// grant is kept and anything wider is taken away. An older release granted
// search to everyone (o+x): that goes here too.
func HoldStateDir(dir string, grant bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("state directory %s: not a directory", dir)
	}
	if grant && st.Gid != AgentsGID {
		if err := unix.Lchown(dir, -1, AgentsGID); err != nil {
			return fmt.Errorf("state directory %s: give search to the agents' group %d: %w", dir, AgentsGID, err)
		}
		st.Gid = AgentsGID
	}
	mode := uint32(st.Mode) & 0o700 //nolint:unconvert // Stat_t.Mode is uint16 on darwin
	if st.Gid == AgentsGID {
		mode |= 0o010
	}
	if uint32(st.Mode)&0o7777 != mode { //nolint:unconvert // as above
		if err := unix.Chmod(dir, mode); err != nil {
			return fmt.Errorf("state directory %s: chmod %#o: %w", dir, mode, err)
		}
	}
	return nil
}

// HostIDInUse names the host user or group that already has uid or gid,
// from /etc/passwd and /etc/group as this process sees them ("" when
// neither names it, or they cannot be read).
func HostIDInUse(uid, gid int) string {
	for _, f := range []struct {
		path, kind string
		id         int
	}{{"/etc/passwd", "user", uid}, {"/etc/group", "group", gid}} {
		raw, err := os.ReadFile(f.path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(raw), "\n") {
			// name:password:id:...
			fields := strings.Split(line, ":")
			if len(fields) >= 3 && fields[2] == strconv.Itoa(f.id) {
				return fmt.Sprintf("%s %s (%s %d)", f.kind, fields[0], f.path, f.id)
			}
		}
	}
	return ""
}

// Capability numbers (linux/capability.h) the host backend asks for.
const (
	capChown    = 0
	capSetgid   = 6
	capSetuid   = 7
	capSysAdmin = 21
)

// effectiveCaps reads this process's effective capability set.
func effectiveCaps() uint64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

func hasCaps(set uint64, caps ...int) bool {
	for _, c := range caps {
		if set&(1<<c) == 0 {
			return false
		}
	}
	return true
}

// CheckNoSymlinks refuses a path with a symbolic link in any of its
// components: an agent that can write the workspace's parent could replace
// the workspace by a link to "/" and be granted the host read-write at the
// next message.
func CheckNoSymlinks(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("%q: want an absolute, clean path", p)
	}
	cur := "/"
	for _, part := range strings.Split(p, "/") {
		if part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if err != nil {
			return fmt.Errorf("%q: %w", p, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%q: %s is a symbolic link; a workspace is used only by its real path, with no link in it (replace the link by the directory, or give the real path)", p, cur)
		}
	}
	return nil
}

// ChownTree gives root and everything beneath it to uid:gid without
// following a symbolic link anywhere (links are chowned themselves) and
// without crossing into another filesystem (a mount point inside the tree
// is left as it is, with everything beneath it). root itself is opened
// with no link in its path.
func ChownTree(root string, uid, gid int) error {
	fd, err := openDirNoSymlinks(root)
	if err != nil {
		return fmt.Errorf("chown %s: open without following links: %w", root, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd) // read-only directory handle: nothing to lose
		return fmt.Errorf("chown %s: %w", root, err)
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		_ = unix.Close(fd) // read-only directory handle: nothing to lose
		return fmt.Errorf("chown %s: %w", root, err)
	}
	return chownDir(fd, root, statDev(&st), uid, gid, 0)
}

// openDirNoSymlinks opens the directory p with no symbolic link in any
// component: openat2 RESOLVE_NO_SYMLINKS, or on kernels before 5.6 (container
// mode still runs there) a walk from "/" opening each component O_NOFOLLOW.
func openDirNoSymlinks(p string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := openat2NoSymlinks(p, flags)
	if !errors.Is(err, unix.ENOSYS) {
		return fd, err
	}
	if !filepath.IsAbs(p) {
		return -1, fmt.Errorf("%q: want an absolute path", p)
	}
	fd, err = unix.Open("/", flags, 0)
	if err != nil {
		return -1, err
	}
	for _, part := range strings.Split(filepath.Clean(p), "/") {
		if part == "" {
			continue
		}
		next, err := unix.Openat(fd, part, flags, 0)
		_ = unix.Close(fd) // read-only directory handle: nothing to lose
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// chownDir chowns the entries of the open directory dirfd (and closes it).
func chownDir(dirfd int, path string, dev uint64, uid, gid, depth int) error {
	dir := os.NewFile(uintptr(dirfd), path)
	defer func() { _ = dir.Close() }() // read-only directory handle
	if depth > 256 {
		return fmt.Errorf("chown %s: too deep", path)
	}
	for {
		names, err := dir.Readdirnames(256)
		for _, name := range names {
			child := filepath.Join(path, name)
			var st unix.Stat_t
			if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("chown %s: %w", child, err)
			}
			if statDev(&st) != dev {
				continue // a mount point: another filesystem
			}
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				if err := unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.ENOENT) {
					return fmt.Errorf("chown %s: %w", child, err)
				}
				continue
			}
			sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("chown %s: %w", child, err)
			}
			if err := unix.Fchown(sub, uid, gid); err != nil {
				_ = unix.Close(sub) // read-only directory handle: nothing to lose
				return fmt.Errorf("chown %s: %w", child, err)
			}
			if err := chownDir(sub, child, dev, uid, gid, depth+1); err != nil {
				return err
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("chown %s: list: %w", path, err)
		}
	}
}

// searchableBy reports the first directory above p (p excluded) that uid
// (group gid, supplementary groups) cannot traverse, judged by mode bits
// and owner: the agent must reach its workspace after it has become uid.
func searchableBy(p string, uid, gid int, groups ...int) error {
	for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		ok := st.Mode&0o001 != 0 ||
			(int(st.Uid) == uid && st.Mode&0o100 != 0) ||
			((int(st.Gid) == gid || slices.Contains(groups, int(st.Gid))) && st.Mode&0o010 != 0)
		if !ok {
			return fmt.Errorf("%s (mode %#o, owner %d:%d) cannot be traversed by the agent's uid %d; make it searchable by others (chmod o+x %s)",
				dir, st.Mode&0o7777, st.Uid, st.Gid, uid, dir)
		}
		if dir == "/" {
			return nil
		}
	}
}

// CoversEnv names the runner's environment variable through which the
// deployment lists (as a JSON array) the denied paths it has covered with
// empty read-only mounts: deploy.ForConfig sets it on the runner
// container.
const CoversEnv = "MEEPA_DENY_COVERS"

// coveredDenies returns the denies inside an allow that are covered in
// this process's mount namespace, so the child needs no privilege to hide
// them: those the deployment says it covered (CoversEnv) and that are
// indeed an empty read-only mount here. Any other read-only mount at a
// denied path (the path's own read-only bind, a squashfs) is not a cover:
// it still shows what it holds.
func coveredDenies(fa landlock.FileAccess) ([]string, error) {
	inside := landlock.DeniesInside(fa)
	listed := os.Getenv(CoversEnv)
	if len(inside) == 0 || listed == "" {
		return nil, nil
	}
	var claimed []string
	if err := json.Unmarshal([]byte(listed), &claimed); err != nil {
		return nil, fmt.Errorf("%s: %w", CoversEnv, err)
	}
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mount table: %w", err)
	}
	mounts := mountTable(string(raw))
	var out []string
	for _, in := range inside {
		if slices.Contains(claimed, in.Path) && !slices.Contains(out, in.Path) && isEmptyCover(in.Path, mounts[in.Path]) {
			out = append(out, in.Path)
		}
	}
	return out, nil
}

// isEmptyCover: path is a read-only mount point holding nothing: an empty
// tmpfs directory, or an empty file.
func isEmptyCover(path string, m mountEntry) bool {
	if !m.readOnly {
		return false
	}
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return false
	case fi.Mode().IsRegular():
		return fi.Size() == 0
	case fi.IsDir() && m.fsType == "tmpfs":
		entries, err := os.ReadDir(path)
		return err == nil && len(entries) == 0
	}
	return false
}

// mountEntry is what the mount table says of one mount point.
type mountEntry struct {
	readOnly bool
	fsType   string
}

// mountTable reads mountinfo text: per mount point, whether its per-mount
// options say ro and its filesystem type. For a path mounted more than
// once the last (topmost) mount decides.
func mountTable(mountinfo string) map[string]mountEntry {
	t := map[string]mountEntry{}
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		e := mountEntry{readOnly: slices.Contains(strings.Split(f[5], ","), "ro")}
		// Optional fields end at "-"; the filesystem type follows it.
		if i := slices.Index(f[6:], "-"); i >= 0 && 6+i+1 < len(f) {
			e.fsType = f[6+i+1]
		}
		t[unescapeMountPath(f[4])] = e
	}
	return t
}

// unescapeMountPath undoes the kernel's octal escapes (\040 for a space,
// \011, \012, \134) in a mountinfo path.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
