//go:build !linux

package landlock

import "fmt"

// Restrict fails closed where there is no Landlock.
func (r *Ruleset) Restrict(abi int) error {
	return fmt.Errorf("%w: Landlock exists only on Linux", ErrUnsupported)
}
