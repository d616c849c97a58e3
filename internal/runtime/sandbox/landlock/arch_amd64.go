//go:build linux

package landlock

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// x32Bit marks x32 syscall numbers, which reach the same kernel code
	// under other numbers.
	x32Bit = 0x40000000
)
