//go:build linux

package landlock

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	x32Bit    = 0
)

// archDenied: arm64 has none of amd64's legacy calls (iopl, uselib, …).
var archDenied []namedSyscall
