//go:build !linux || !(amd64 || arm64)

package landlock

import "fmt"

// DropCapabilities fails closed on platforms the host backend does not
// support.
func DropCapabilities() error {
	return fmt.Errorf("%w: host mode supports linux/amd64 and linux/arm64", ErrUnsupported)
}

// InstallSocketFilter fails closed on platforms the host backend does not
// support.
func InstallSocketFilter(denyNet bool) error {
	return fmt.Errorf("%w: host mode supports linux/amd64 and linux/arm64", ErrUnsupported)
}

// InstallMessageFilter fails closed where there is no filter to install:
// agent-run then answers no message.
func InstallMessageFilter() error {
	return fmt.Errorf("%w: the per-message syscall filter exists for linux/amd64 and linux/arm64 only", ErrUnsupported)
}

// DeniedSyscalls is empty where the host backend has no filter; the
// per-message container's profile is made on Linux only.
func DeniedSyscalls() []string { return nil }
