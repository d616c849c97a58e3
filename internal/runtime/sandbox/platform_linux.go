package sandbox

import (
	"syscall"

	"github.com/moby/profiles/seccomp"
)

// The provider is released for darwin too (it drives a Linux daemon from
// there); these two are the Linux-only pieces the sandbox package needs,
// each with its non-Linux counterpart in platform_other.go.

// childProcAttr: the host backend's per-message child in a session of its
// own, killed if the runner dies first.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
}

// defaultSeccompProfile is Docker's default profile as moby/profiles has it
// (that package builds it on Linux only).
func defaultSeccompProfile() (*seccomp.Seccomp, error) { return seccomp.DefaultProfile(), nil }
