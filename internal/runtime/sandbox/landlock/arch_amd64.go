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
var archDenied = []namedSyscall{
	{"iopl", unix.SYS_IOPL}, {"ioperm", unix.SYS_IOPERM}, {"uselib", unix.SYS_USELIB}, {"_sysctl", unix.SYS__SYSCTL}, {"ustat", unix.SYS_USTAT}, {"sysfs", unix.SYS_SYSFS},
	{"create_module", unix.SYS_CREATE_MODULE}, {"get_kernel_syms", unix.SYS_GET_KERNEL_SYMS}, {"query_module", unix.SYS_QUERY_MODULE}, {"nfsservctl", unix.SYS_NFSSERVCTL},
}
