//go:build linux

package landlock

import (
	"fmt"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExecRestricted is the restricted child's whole life: it applies c to the
// calling process (rlimits, no capabilities, Landlock, the socket filter)
// and execs argv[0] with argv and the current environment. It returns only
// on failure, and then the process must exit without running anything.
//
// Everything happens on one locked OS thread, which is also the thread that
// execs: capabilities are per thread, and the exec'd program inherits the
// exec'ing thread's.
func ExecRestricted(c *ChildConfig, argv []string) error {
	runtime.LockOSThread()
	if c.Ruleset != nil {
		// The bounding set first, while this thread may still change it
		// (CAP_SETPCAP); the rest goes with the uid switch and capset.
		if err := dropBounding(); err != nil {
			return err
		}
		if len(c.Ruleset.Hide) > 0 {
			if err := hidePaths(c.Ruleset.Hide, c.EmptyFile); err != nil {
				return err
			}
		}
		if c.User != nil {
			if err := switchUser(c.User); err != nil {
				return err
			}
		}
		if err := DropCapabilities(); err != nil {
			return err
		}
		if err := c.Ruleset.Restrict(DetectABI()); err != nil {
			return err
		}
		if err := InstallSocketFilter(c.Ruleset.DenyTCP); err != nil {
			return err
		}
	}
	// The limits come last, right before exec, so that they bound the
	// agent loop and not this setup.
	if c.DataLimit > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_DATA, &unix.Rlimit{Cur: c.DataLimit, Max: c.DataLimit}); err != nil {
			return fmt.Errorf("setrlimit data: %w", err)
		}
	}
	if c.NProc > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: c.NProc, Max: c.NProc}); err != nil {
			return fmt.Errorf("setrlimit nproc: %w", err)
		}
	}
	// No core dumps: a dump of the agent loop would hold the API key.
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return fmt.Errorf("setrlimit core: %w", err)
	}
	err := syscall.Exec(argv[0], argv, os.Environ())
	return fmt.Errorf("exec %s: %w", argv[0], err)
}

// SetNonDumpable clears the calling process's dumpable flag: its
// /proc/<pid> entries (mem, environ, fd) become root's, and no process
// without CAP_SYS_PTRACE may attach to it, even under the same uid. The
// agent loop holds the API key and the secrets in memory while the tools
// it starts run as its uid. exec(2) sets the flag again, so each program
// that holds secrets calls this itself.
func SetNonDumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl PR_SET_DUMPABLE: %w", err)
	}
	return nil
}

// switchUser makes every thread of the process u (real, effective and saved
// ids; only u.Groups as supplementary groups). syscall's setters apply to
// all threads.
func switchUser(u *ChildUser) error {
	if u.UID <= 0 || u.GID <= 0 {
		return fmt.Errorf("agent uid %d:%d: want a dedicated non-root uid and gid", u.UID, u.GID)
	}
	for _, g := range u.Groups {
		if g <= 0 {
			return fmt.Errorf("agent group %d: want a non-root group", g)
		}
	}
	if err := syscall.Setgroups(u.Groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(u.GID, u.GID, u.GID); err != nil {
		return fmt.Errorf("setresgid %d: %w", u.GID, err)
	}
	if err := syscall.Setresuid(u.UID, u.UID, u.UID); err != nil {
		return fmt.Errorf("setresuid %d: %w", u.UID, err)
	}
	return nil
}

// hidePaths covers each denied path with an empty read-only mount, in the
// mount namespace the host backend started this child in (never the
// runner's: that is checked first, since a mount there would hide the
// path from the host too). Each path is opened without following any
// symbolic link (openat2 RESOLVE_NO_SYMLINKS) and the mount goes onto that
// open file, so a path swapped for a link since the rules were compiled
// fails instead of hiding something else.
func hidePaths(hide []Hidden, emptyFile string) error {
	self, err := os.Readlink("/proc/thread-self/ns/mnt")
	if err != nil {
		return fmt.Errorf("hide denied paths: own mount namespace: %w", err)
	}
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err != nil {
		return fmt.Errorf("hide denied paths: the runner's mount namespace: %w", err)
	}
	if self == parent {
		return fmt.Errorf("hide denied paths: the child shares the runner's mount namespace; refusing to mount over %s there", hide[0].Path)
	}
	const flags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	for _, h := range hide {
		fd, err := unix.Openat2(unix.AT_FDCWD, h.Path, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
			Resolve: unix.RESOLVE_NO_SYMLINKS,
		})
		if err != nil {
			return fmt.Errorf("hide denied path %s: open without following links: %w", h.Path, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			_ = unix.Close(fd) // an O_PATH handle: nothing to lose
			return fmt.Errorf("hide denied path %s: %w", h.Path, err)
		}
		target := fmt.Sprintf("/proc/thread-self/fd/%d", fd)
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		switch {
		case isDir != h.Dir:
			err = fmt.Errorf("changed type since the rules were compiled")
		case isDir:
			err = unix.Mount("meepa-hidden", target, "tmpfs", flags, "size=4k,mode=0555")
		case emptyFile == "":
			err = fmt.Errorf("no empty file to mount over it")
		default:
			// The remount names the new mount by its path (the fd still
			// names the file beneath it); had the path been swapped, it
			// would not be a mount point and the remount fails.
			if err = unix.Mount(emptyFile, target, "", unix.MS_BIND, ""); err == nil {
				err = unix.Mount("", h.Path, "", unix.MS_BIND|unix.MS_REMOUNT|flags, "")
			}
		}
		_ = unix.Close(fd) // an O_PATH handle: nothing to lose
		if err != nil {
			return fmt.Errorf("hide denied path %s: %w", h.Path, err)
		}
	}
	return nil
}
