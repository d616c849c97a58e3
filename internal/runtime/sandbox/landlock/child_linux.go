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
