//go:build !linux

package landlock

import "fmt"

// ExecRestricted fails closed where there is no Landlock.
func ExecRestricted(c *ChildConfig, argv []string) error {
	return fmt.Errorf("%w: the host backend runs only on Linux", ErrUnsupported)
}

// SetNonDumpable has nothing to do where there is no /proc and no ptrace
// by the same rules; the host backend does not run here anyway.
func SetNonDumpable() error { return nil }
