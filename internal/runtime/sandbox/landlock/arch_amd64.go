//go:build linux

package landlock

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// x32Bit marks x32 syscall numbers, which reach the same kernel code
	// under other numbers.
	x32Bit = 0x40000000
)

// archDenied are the refusals of Docker's default profile that only amd64
// has.
var archDenied = []uint32{
	unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_USELIB, unix.SYS__SYSCTL, unix.SYS_USTAT, unix.SYS_SYSFS,
	unix.SYS_CREATE_MODULE, unix.SYS_GET_KERNEL_SYMS, unix.SYS_QUERY_MODULE, unix.SYS_NFSSERVCTL,
}
