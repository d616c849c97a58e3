//go:build !linux

package landlock

import "fmt"

// ExecRestricted fails closed where there is no Landlock.
func ExecRestricted(c *ChildConfig, argv []string) error {
	return fmt.Errorf("%w: the host backend runs only on Linux", ErrUnsupported)
}
