//go:build linux && (amd64 || arm64)

package landlock

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DropCapabilities empties the calling thread's bounding, ambient,
// inheritable, permitted and effective capability sets. A runner that runs
// as root would otherwise hand its child CAP_SYS_ADMIN, CAP_NET_RAW and the
// rest, which Landlock does not cover. Capabilities are per thread: call it
// on a locked OS thread and exec from that same thread, so that the exec'd
// program (even as uid 0) starts with none.
func DropCapabilities() error {
	if err := dropBounding(); err != nil {
		return err
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// dropBounding empties the ambient and bounding sets, as far as this
// thread may (an unprivileged runner's bounding set cannot be changed; its
// permitted set, emptied by DropCapabilities, is what counts).
func dropBounding() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; c <= 63; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if errors.Is(err, unix.EPERM) {
			break // no CAP_SETPCAP
		}
		if err != nil {
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	return nil
}

// seccomp_data offsets (little-endian: the low 32 bits of an argument come
// first).
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
	offArg1 = 24
	offArg2 = 32
)

// InstallSocketFilter installs a seccomp filter on every thread of the
// process that complements Landlock where it has no reach. It starts from
// Docker's default profile: what that profile refuses to a container
// without capabilities is refused here too (the child has none), and the
// socket rules are stricter:
//
//   - socket(AF_UNIX) fails with EACCES: before Landlock ABI 9 a sandboxed
//     process may connect to any pathname unix socket it can name, the
//     Docker daemon's among them. socketpair(2) works for stream pairs only:
//     a datagram or seqpacket pair's sendto(2) reaches pathname datagram
//     sockets such as /dev/log.
//   - with denyNet, no AF_INET/AF_INET6 socket at all (EACCES); Landlock's
//     TCP rules deny the rest of TCP as well, a second layer.
//   - otherwise only AF_INET/AF_INET6 TCP stream sockets (protocol 0 or
//     IPPROTO_TCP) and UDP datagram sockets (0 or IPPROTO_UDP, for DNS):
//     no SCTP, MPTCP, ICMP, raw, packet, netlink, vsock or SMC sockets,
//     none of which the agent needs and some of which Landlock's TCP rules
//     do not see.
//   - the deny list (EPERM): tracing and reading other processes' memory
//     (ptrace, process_vm_readv/writev, pidfd_getfd, kcmp), the kernel
//     keyrings, bpf, userfaultfd, perf_event_open, namespaces (unshare,
//     setns, clone with a CLONE_NEW* flag), mounts, modules, kexec, reboot,
//     swap, clocks, NUMA policy, io_uring, setsid (every process of the
//     agent stays in the session the host backend kills at the end of the
//     message); clone3 fails with ENOSYS, as under Docker, so that libc
//     falls back to clone, whose flags the filter can see.
//   - a syscall through another ABI (x32, 32-bit compat) fails with EPERM,
//     so that none of the above can be bypassed through it.
//
// It needs no_new_privs (which Restrict sets) or CAP_SYS_ADMIN.
func InstallSocketFilter(denyNet bool) error {
	return install(socketFilter(denyNet))
}

// InstallMessageFilter sets no_new_privs and installs, on every thread of
// the process, the refusals every per-message sandbox gets whatever runs
// it (agent-run calls it before it reads its request): DeniedSyscalls with
// EPERM, clone with a namespace flag with EPERM, clone3 with ENOSYS, any
// other ABI with EPERM. It is the deny part of InstallSocketFilter, without
// the socket rules and the session refusal, which only the host backend
// needs; a pod or container keeps its runtime's own profile beneath it.
// Why in the process and not only in the runtime's profile: a cluster's
// RuntimeDefault is the node's container runtime's (containerd 1.6 still
// allows io_uring), and a Localhost profile would need a file on every
// node. Filters stack, so under a stricter profile (Docker's, the host
// child's) it changes nothing.
func InstallMessageFilter() error {
	// no_new_privs is per thread: set it on the thread that installs; TSYNC
	// then gives it, and the filter, to every other thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return install(messageFilter())
}

func install(prog []unix.SockFilter) error {
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}

// namedSyscall is a syscall as a seccomp profile names it and as this
// architecture numbers it.
type namedSyscall struct {
	name string
	nr   uint32
}

// DeniedSyscalls names what every per-message sandbox is refused outright
// (the deny list below and the architecture's own): the host backend's
// filter, InstallMessageFilter and the per-message container's seccomp
// profile (sandbox.MessageSeccompProfile) all refuse these.
func DeniedSyscalls() []string {
	var out []string
	for _, sc := range append(slices.Clone(deniedSyscalls), archDenied...) {
		out = append(out, sc.name)
	}
	return out
}

// deniedSyscalls are refused with EPERM on every architecture; archDenied
// (arch_*.go) adds the ones only some architectures have. The list is
// Docker's default profile's refusals for a process without capabilities
// in moby/profiles v0.3.0, plus keyctl, add_key, request_key and
// userfaultfd, which that profile leaves out of its allow list.
var deniedSyscalls = []namedSyscall{
	// Other processes' memory and descriptors.
	{"ptrace", unix.SYS_PTRACE}, {"process_vm_readv", unix.SYS_PROCESS_VM_READV}, {"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV}, {"pidfd_getfd", unix.SYS_PIDFD_GETFD},
	{"kcmp", unix.SYS_KCMP}, {"process_madvise", unix.SYS_PROCESS_MADVISE},
	// Kernel keyrings: shared by uid, and a long history of bugs.
	{"keyctl", unix.SYS_KEYCTL}, {"add_key", unix.SYS_ADD_KEY}, {"request_key", unix.SYS_REQUEST_KEY},
	// Kernel attack surface a tool never needs.
	{"bpf", unix.SYS_BPF}, {"userfaultfd", unix.SYS_USERFAULTFD}, {"perf_event_open", unix.SYS_PERF_EVENT_OPEN}, {"fanotify_init", unix.SYS_FANOTIFY_INIT},
	{"io_uring_setup", unix.SYS_IO_URING_SETUP}, {"io_uring_enter", unix.SYS_IO_URING_ENTER}, {"io_uring_register", unix.SYS_IO_URING_REGISTER},
	{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE}, {"syslog", unix.SYS_SYSLOG}, {"vhangup", unix.SYS_VHANGUP},
	// Namespaces (clone is checked by its flags below).
	{"unshare", unix.SYS_UNSHARE}, {"setns", unix.SYS_SETNS},
	// Mounts.
	{"mount", unix.SYS_MOUNT}, {"umount2", unix.SYS_UMOUNT2}, {"pivot_root", unix.SYS_PIVOT_ROOT}, {"chroot", unix.SYS_CHROOT},
	{"fsopen", unix.SYS_FSOPEN}, {"fsconfig", unix.SYS_FSCONFIG}, {"fsmount", unix.SYS_FSMOUNT}, {"fspick", unix.SYS_FSPICK},
	{"move_mount", unix.SYS_MOVE_MOUNT}, {"open_tree", unix.SYS_OPEN_TREE}, {"mount_setattr", unix.SYS_MOUNT_SETATTR},
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT}, {"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT},
	{"quotactl", unix.SYS_QUOTACTL}, {"quotactl_fd", unix.SYS_QUOTACTL_FD},
	// The machine.
	{"init_module", unix.SYS_INIT_MODULE}, {"finit_module", unix.SYS_FINIT_MODULE}, {"delete_module", unix.SYS_DELETE_MODULE},
	{"kexec_load", unix.SYS_KEXEC_LOAD}, {"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD}, {"reboot", unix.SYS_REBOOT},
	{"swapon", unix.SYS_SWAPON}, {"swapoff", unix.SYS_SWAPOFF}, {"acct", unix.SYS_ACCT},
	{"sethostname", unix.SYS_SETHOSTNAME}, {"setdomainname", unix.SYS_SETDOMAINNAME},
	{"settimeofday", unix.SYS_SETTIMEOFDAY}, {"clock_settime", unix.SYS_CLOCK_SETTIME},
	{"get_mempolicy", unix.SYS_GET_MEMPOLICY}, {"set_mempolicy", unix.SYS_SET_MEMPOLICY}, {"mbind", unix.SYS_MBIND}, {"set_mempolicy_home_node", unix.SYS_SET_MEMPOLICY_HOME_NODE},
}

// sessionSyscalls are refused by the host backend's filter only: every
// process of the agent stays in the session the backend kills at the end of
// the message. A container's or pod's processes all die with it, whatever
// their session.
var sessionSyscalls = []namedSyscall{{"setsid", unix.SYS_SETSID}}

// cloneNamespaces are the clone(2) flags that make a new namespace
// (CLONE_NEWNS … CLONE_NEWNET), refused as Docker does.
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// asm is a tiny BPF assembler with forward labels.
type asm struct {
	ins    []unix.SockFilter
	fix    []fixup
	labels map[string]int
}

type fixup struct {
	at     int
	jt, jf string
}

func (a *asm) ld(off uint32) {
	a.ins = append(a.ins, unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off})
}
func (a *asm) and(k uint32) {
	a.ins = append(a.ins, unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: k})
}

// jeq / jge jump to jt when true, else to jf ("" = next instruction).
func (a *asm) jmp(op uint16, k uint32, jt, jf string) {
	a.fix = append(a.fix, fixup{at: len(a.ins), jt: jt, jf: jf})
	a.ins = append(a.ins, unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, K: k})
}
func (a *asm) ret(k uint32) {
	a.ins = append(a.ins, unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k})
}
func (a *asm) label(name string) { a.labels[name] = len(a.ins) }

func (a *asm) assemble() []unix.SockFilter {
	for _, f := range a.fix {
		off := func(l string) uint8 {
			if l == "" {
				return 0
			}
			to, ok := a.labels[l]
			if !ok || to <= f.at || to-f.at-1 > 255 {
				panic("bpf: bad label " + l)
			}
			return uint8(to - f.at - 1)
		}
		a.ins[f.at].Jt, a.ins[f.at].Jf = off(f.jt), off(f.jf)
	}
	return a.ins
}

func socketFilter(denyNet bool) []unix.SockFilter { return filter(true, denyNet) }

func messageFilter() []unix.SockFilter { return filter(false, false) }

// filter is the BPF program: host adds the session refusal and the socket
// rules (denyNet as InstallSocketFilter says) to what every sandbox gets.
func filter(host, denyNet bool) []unix.SockFilter {
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	eperm := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EPERM)
	eacces := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EACCES)
	enosys := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.ENOSYS)

	a := &asm{labels: map[string]int{}}
	a.ld(offArch)
	a.jmp(unix.BPF_JEQ, auditArch, "", "eperm")
	a.ld(offNr)
	if x32Bit != 0 {
		a.jmp(unix.BPF_JGE, x32Bit, "eperm", "")
	}
	denied := append(slices.Clone(deniedSyscalls), archDenied...)
	if host {
		denied = append(denied, sessionSyscalls...)
	}
	for _, sc := range denied {
		a.jmp(unix.BPF_JEQ, sc.nr, "eperm", "")
	}
	a.jmp(unix.BPF_JEQ, unix.SYS_CLONE3, "enosys", "")
	if !host {
		a.jmp(unix.BPF_JEQ, unix.SYS_CLONE, "clone", "allow")
	} else {
		a.jmp(unix.BPF_JEQ, unix.SYS_CLONE, "clone", "")
		a.jmp(unix.BPF_JEQ, unix.SYS_SOCKETPAIR, "socketpair", "")
		a.jmp(unix.BPF_JEQ, unix.SYS_SOCKET, "socket", "allow")
	}

	// clone(flags, …) on amd64 and arm64: flags is the first argument.
	a.label("clone")
	a.ld(offArg0)
	a.and(cloneNamespaces)
	a.jmp(unix.BPF_JEQ, 0, "allow", "eperm")

	if host {
		a.label("socketpair")
		a.ld(offArg1)
		a.and(0xf) // SOCK_TYPE_MASK: without SOCK_NONBLOCK / SOCK_CLOEXEC
		a.jmp(unix.BPF_JEQ, unix.SOCK_STREAM, "allow", "eacces")

		a.label("socket")
		if denyNet {
			// No family at all: AF_UNIX is refused always, AF_INET/AF_INET6
			// without network, every other family always.
			a.ret(eacces)
		} else {
			a.ld(offArg0)
			a.jmp(unix.BPF_JEQ, unix.AF_INET, "inet", "")
			a.jmp(unix.BPF_JEQ, unix.AF_INET6, "inet", "eacces")
			a.label("inet")
			a.ld(offArg1)
			a.and(0xf)
			a.jmp(unix.BPF_JEQ, unix.SOCK_STREAM, "stream", "")
			a.jmp(unix.BPF_JEQ, unix.SOCK_DGRAM, "dgram", "eacces")
			a.label("stream")
			a.ld(offArg2)
			a.jmp(unix.BPF_JEQ, 0, "allow", "")
			a.jmp(unix.BPF_JEQ, unix.IPPROTO_TCP, "allow", "eacces")
			a.label("dgram")
			a.ld(offArg2)
			a.jmp(unix.BPF_JEQ, 0, "allow", "")
			a.jmp(unix.BPF_JEQ, unix.IPPROTO_UDP, "allow", "eacces")
		}
	}
	a.label("allow")
	a.ret(allow)
	a.label("eacces")
	a.ret(eacces)
	a.label("enosys")
	a.ret(enosys)
	a.label("eperm")
	a.ret(eperm)
	return a.assemble()
}
