//go:build !linux

package sandbox

import (
	"errors"
	"syscall"

	"github.com/moby/profiles/seccomp"
	"golang.org/x/sys/unix"
)

// childProcAttr: no parent-death signal outside Linux. The host backend
// never gets this far there: it needs Landlock and fails closed before.
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// defaultSeccompProfile: moby/profiles builds Docker's default profile on
// Linux only, so a provider on another OS cannot derive the host-mode
// runner container's profile from it, and says so rather than run the
// runner with another profile.
func defaultSeccompProfile() (*seccomp.Seccomp, error) {
	return nil, errors.New("runner seccomp profile: Docker's default profile is only available to a provider running on Linux; " +
		"run Terraform on Linux for host-mode agents in a runner container, or use container_mode")
}

// unshareMounts: no mount namespaces outside Linux, so denied paths cannot
// be hidden; an error rather than a child that would see them.
func unshareMounts(*syscall.SysProcAttr) error {
	return errors.New("a mount namespace for the agent child needs Linux")
}

// openat2NoSymlinks: openat2 is Linux's; ENOSYS sends the caller to its
// component-by-component walk.
func openat2NoSymlinks(string, int) (int, error) { return -1, unix.ENOSYS }

// statDev is st's device number (uint64 on Linux, int32 on darwin).
func statDev(st *unix.Stat_t) uint64 { return uint64(st.Dev) }
