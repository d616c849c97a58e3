//go:build linux && (amd64 || arm64)

package landlock

import (
	"errors"
	"fmt"
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
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; c <= 63; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if errors.Is(err, unix.EPERM) {
			// No CAP_SETPCAP: an unprivileged runner; its bounding set
			// cannot be changed, but its permitted set is what counts and
			// is emptied below.
			break
		}
		if err != nil {
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
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
// process that complements Landlock where it has no reach on older kernels:
//
//   - socket(AF_UNIX) fails with EACCES: before Landlock ABI 9 a sandboxed
//     process may connect to any pathname unix socket it can name, the
//     Docker daemon's among them. socketpair(2) still works.
//   - io_uring_setup fails with EPERM: io_uring can create sockets without
//     the socket(2) syscall this filter sees.
//   - with denyNet, socket() for every family other than AF_INET/AF_INET6
//     stream sockets fails with EACCES (no UDP, raw, netlink, vsock or
//     packet sockets), as does IPPROTO_MPTCP, which Landlock's TCP rules do
//     not cover; the remaining TCP sockets are Landlock's to deny.
//   - a syscall through another ABI (x32, 32-bit compat) fails with EPERM,
//     so that none of the above can be bypassed through it.
//
// It needs no_new_privs (which Restrict sets) or CAP_SYS_ADMIN.
func InstallSocketFilter(denyNet bool) error {
	prog := socketFilter(denyNet)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}

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

func socketFilter(denyNet bool) []unix.SockFilter {
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	eperm := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EPERM)
	eacces := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EACCES)

	a := &asm{labels: map[string]int{}}
	a.ld(offArch)
	a.jmp(unix.BPF_JEQ, auditArch, "", "eperm")
	a.ld(offNr)
	if x32Bit != 0 {
		a.jmp(unix.BPF_JGE, x32Bit, "eperm", "")
	}
	a.jmp(unix.BPF_JEQ, unix.SYS_IO_URING_SETUP, "eperm", "")
	a.jmp(unix.BPF_JEQ, unix.SYS_SOCKET, "socket", "allow")

	a.label("socket")
	a.ld(offArg0)
	a.jmp(unix.BPF_JEQ, unix.AF_UNIX, "eacces", "")
	if denyNet {
		a.jmp(unix.BPF_JEQ, unix.AF_INET, "inet", "")
		a.jmp(unix.BPF_JEQ, unix.AF_INET6, "inet", "eacces")
		a.label("inet")
		a.ld(offArg1)
		a.and(0xf) // SOCK_TYPE_MASK: without SOCK_NONBLOCK / SOCK_CLOEXEC
		a.jmp(unix.BPF_JEQ, unix.SOCK_STREAM, "", "eacces")
		a.ld(offArg2)
		a.jmp(unix.BPF_JEQ, unix.IPPROTO_MPTCP, "eacces", "allow")
	}
	a.label("allow")
	a.ret(allow)
	a.label("eacces")
	a.ret(eacces)
	a.label("eperm")
	a.ret(eperm)
	return a.assemble()
}
