package sandbox

import (
	"syscall"

	"github.com/moby/profiles/seccomp"
	"golang.org/x/sys/unix"
)

// The provider is released for darwin too (it drives a Linux daemon from
// there); these are the Linux-only pieces the sandbox package needs,
// each with its non-Linux counterpart in platform_other.go.

// childProcAttr: the host backend's per-message child in a session of its
// own, killed if the runner dies first.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
}

// defaultSeccompProfile is Docker's default profile as moby/profiles has it
// (that package builds it on Linux only).
func defaultSeccompProfile() (*seccomp.Seccomp, error) { return seccomp.DefaultProfile(), nil }

// unshareMounts gives the child a mount namespace of its own, where it
// covers the denied paths before it restricts itself.
func unshareMounts(a *syscall.SysProcAttr) error {
	a.Unshareflags = syscall.CLONE_NEWNS
	return nil
}

// openat2NoSymlinks opens p with openat2 RESOLVE_NO_SYMLINKS (ENOSYS before
// Linux 5.6).
func openat2NoSymlinks(p string, flags int) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_NO_SYMLINKS})
}

// statDev is st's device number (uint64 on Linux, int32 on darwin).
func statDev(st *unix.Stat_t) uint64 { return st.Dev }
