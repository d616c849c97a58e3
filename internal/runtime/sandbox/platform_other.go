//go:build !linux

package sandbox

import (
	"errors"
	"syscall"

	"github.com/moby/profiles/seccomp"
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
