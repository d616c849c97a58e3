//go:build linux && (amd64 || arm64)

package landlock

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// run executes the socket filter in x/net/bpf's classic-BPF VM. The VM
// loads big-endian words, so seccomp_data is laid out big-endian here; the
// offsets are the kernel's.
func run(t *testing.T, prog []unix.SockFilter, arch uint32, nr uint32, args ...uint32) uint32 {
	t.Helper()
	ins := make([]bpf.Instruction, len(prog))
	for i, f := range prog {
		ins[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}.Disassemble()
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatalf("filter does not assemble: %v", err)
	}
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[offNr:], nr)
	binary.BigEndian.PutUint32(data[offArch:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(data[offArg0+8*i:], a)
	}
	ret, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(ret)
}

func TestSocketFilter(t *testing.T) {
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	eacces := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EACCES)
	eperm := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EPERM)
	const stream, dgram, nonblock = unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC
	for _, tc := range []struct {
		name    string
		denyNet bool
		arch    uint32
		nr      uint32
		args    []uint32
		want    uint32
	}{
		{"read is allowed", true, auditArch, unix.SYS_READ, nil, allow},
		{"stream socketpair is allowed", true, auditArch, unix.SYS_SOCKETPAIR, []uint32{unix.AF_UNIX, stream | nonblock}, allow},
		{"datagram socketpair refused", false, auditArch, unix.SYS_SOCKETPAIR, []uint32{unix.AF_UNIX, dgram}, eacces},
		{"seqpacket socketpair refused", false, auditArch, unix.SYS_SOCKETPAIR, []uint32{unix.AF_UNIX, unix.SOCK_SEQPACKET | nonblock}, eacces},
		{"unix socket refused", false, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_UNIX, stream | nonblock, 0}, eacces},
		{"unix socket refused, network denied", true, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_UNIX, dgram, 0}, eacces},
		{"tcp allowed with network", false, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_INET, stream | nonblock, 0}, allow},
		{"tcp6 IPPROTO_TCP allowed with network", false, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_INET6, stream, unix.IPPROTO_TCP}, allow},
		{"udp allowed with network", false, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_INET6, dgram, 0}, allow},
		{"udp IPPROTO_UDP allowed with network", false, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_INET, dgram, unix.IPPROTO_UDP}, allow},
		{"sctp stream refused with network", false, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_INET, stream, unix.IPPROTO_SCTP}, eacces},
		{"sctp seqpacket refused with network", false, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_INET, unix.SOCK_SEQPACKET, unix.IPPROTO_SCTP}, eacces},
		{"mptcp refused with network", false, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_INET6, stream, unix.IPPROTO_MPTCP}, eacces},
		{"icmp refused with network", false, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_INET, dgram, unix.IPPROTO_ICMP}, eacces},
		{"smc refused with network", false, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_SMC, stream, 0}, eacces},
		{"netlink refused with network", false, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_NETLINK, dgram, 0}, eacces},
		{"raw refused with network", false, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_INET, unix.SOCK_RAW, 1}, eacces},
		{"tcp refused without network", true, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_INET, stream | nonblock, unix.IPPROTO_TCP}, eacces},
		{"tcp6 refused without network", true, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_INET6, stream, 0}, eacces},
		{"udp refused without network", true, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_INET, dgram | nonblock, 0}, eacces},
		{"smc refused without network", true, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_SMC, stream, 0}, eacces},
		{"vsock refused without network", true, auditArch, unix.SYS_SOCKET, []uint32{unix.AF_VSOCK, stream, 0}, eacces},
		{"io_uring refused", false, auditArch, unix.SYS_IO_URING_SETUP, nil, eperm},
		{"setsid refused", false, auditArch, unix.SYS_SETSID, nil, eperm},
		{"setpgid allowed", false, auditArch, unix.SYS_SETPGID, nil, allow},
		{"ptrace refused", false, auditArch, unix.SYS_PTRACE, nil, eperm},
		{"process_vm_readv refused", false, auditArch, unix.SYS_PROCESS_VM_READV, nil, eperm},
		{"process_vm_writev refused", false, auditArch, unix.SYS_PROCESS_VM_WRITEV, nil, eperm},
		{"pidfd_getfd refused", false, auditArch, unix.SYS_PIDFD_GETFD, nil, eperm},
		{"keyctl refused", false, auditArch, unix.SYS_KEYCTL, nil, eperm},
		{"add_key refused", false, auditArch, unix.SYS_ADD_KEY, nil, eperm},
		{"request_key refused", false, auditArch, unix.SYS_REQUEST_KEY, nil, eperm},
		{"bpf refused", false, auditArch, unix.SYS_BPF, nil, eperm},
		{"userfaultfd refused", false, auditArch, unix.SYS_USERFAULTFD, nil, eperm},
		{"perf_event_open refused", false, auditArch, unix.SYS_PERF_EVENT_OPEN, nil, eperm},
		{"unshare refused", false, auditArch, unix.SYS_UNSHARE, []uint32{unix.CLONE_NEWUSER}, eperm},
		{"clone with CLONE_NEWUSER refused", false, auditArch, unix.SYS_CLONE, []uint32{unix.CLONE_NEWUSER | uint32(unix.SIGCHLD)}, eperm},
		{"clone with CLONE_NEWNET refused", false, auditArch, unix.SYS_CLONE, []uint32{unix.CLONE_NEWNET}, eperm},
		{"clone of a thread allowed", false, auditArch, unix.SYS_CLONE, []uint32{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD}, allow},
		{"fork allowed", false, auditArch, unix.SYS_CLONE, []uint32{uint32(unix.SIGCHLD)}, allow},
		{"clone3 is ENOSYS", false, auditArch, unix.SYS_CLONE3, nil, uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.ENOSYS)},
		{"another arch refused", false, auditArch ^ 1, unix.SYS_READ, nil, eperm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(t, socketFilter(tc.denyNet), tc.arch, tc.nr, tc.args...); got != tc.want {
				t.Errorf("filter(deny_net=%v) = %#x, want %#x", tc.denyNet, got, tc.want)
			}
		})
	}
	if x32Bit != 0 {
		if got := run(t, socketFilter(false), auditArch, x32Bit|unix.SYS_SOCKET, unix.AF_UNIX); got != eperm {
			t.Errorf("x32 socket = %#x, want EPERM", got)
		}
	}
}

// The filter agent-run installs on itself refuses what every sandbox is
// refused and leaves the host backend's session and socket rules out.
func TestMessageFilter(t *testing.T) {
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	eperm := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EPERM)
	enosys := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.ENOSYS)
	prog := messageFilter()
	for _, tc := range []struct {
		name string
		arch uint32
		nr   uint32
		args []uint32
		want uint32
	}{
		{"read allowed", auditArch, unix.SYS_READ, nil, allow},
		{"io_uring_setup refused", auditArch, unix.SYS_IO_URING_SETUP, nil, eperm},
		{"io_uring_enter refused", auditArch, unix.SYS_IO_URING_ENTER, nil, eperm},
		{"io_uring_register refused", auditArch, unix.SYS_IO_URING_REGISTER, nil, eperm},
		{"ptrace refused", auditArch, unix.SYS_PTRACE, nil, eperm},
		{"bpf refused", auditArch, unix.SYS_BPF, nil, eperm},
		{"unshare refused", auditArch, unix.SYS_UNSHARE, nil, eperm},
		{"clone with CLONE_NEWUSER refused", auditArch, unix.SYS_CLONE, []uint32{unix.CLONE_NEWUSER | uint32(unix.SIGCHLD)}, eperm},
		{"fork allowed", auditArch, unix.SYS_CLONE, []uint32{uint32(unix.SIGCHLD)}, allow},
		{"clone3 is ENOSYS", auditArch, unix.SYS_CLONE3, nil, enosys},
		{"setsid allowed", auditArch, unix.SYS_SETSID, nil, allow},
		{"unix socket allowed", auditArch, unix.SYS_SOCKET, []uint32{unix.AF_UNIX, unix.SOCK_STREAM, 0}, allow},
		{"datagram socketpair allowed", auditArch, unix.SYS_SOCKETPAIR, []uint32{unix.AF_UNIX, unix.SOCK_DGRAM}, allow},
		{"another arch refused", auditArch ^ 1, unix.SYS_READ, nil, eperm},
	} {
		if got := run(t, prog, tc.arch, tc.nr, tc.args...); got != tc.want {
			t.Errorf("%s: %#x, want %#x", tc.name, got, tc.want)
		}
	}
	for _, sc := range append(append([]namedSyscall(nil), deniedSyscalls...), archDenied...) {
		if got := run(t, prog, auditArch, sc.nr); got != eperm {
			t.Errorf("%s: %#x, want EPERM", sc.name, got)
		}
	}
	if x32Bit != 0 {
		if got := run(t, prog, auditArch, x32Bit|unix.SYS_IO_URING_SETUP); got != eperm {
			t.Errorf("x32 io_uring_setup = %#x, want EPERM", got)
		}
	}
}
