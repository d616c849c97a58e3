// Command probe tries each technique of the escape suite (package escape)
// from wherever it runs and prints one line per scenario:
//
//	<scenario>\t<escaped|held|unsupported>\t<what happened>
//
// "escaped" means the technique's first step worked (the step after which
// a real attacker owns the host or its data); "held" means it was refused;
// "unsupported" means the kernel here has no such thing (ENOSYS, no such
// file), so the scenario says nothing either way. No probe changes the
// host: files are opened for writing but never written, a module and a BPF
// program that cannot do anything are offered, a tmpfs or cgroup mount is
// undone at once.
//
// Usage: probe run -secret S -marker M -cred PATH -meta ADDR -egress ADDR -dns ADDR
// or:    probe victim M (sleeps: the process another probe looks for)
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

type result struct {
	state  string // escaped, held, unsupported
	detail string
}

func escaped(f string, a ...any) result { return result{"escaped", fmt.Sprintf(f, a...)} }
func held(f string, a ...any) result    { return result{"held", fmt.Sprintf(f, a...)} }
func unsupported(f string, a ...any) result {
	return result{"unsupported", fmt.Sprintf(f, a...)}
}

// refusal turns a failed call's error into held or unsupported.
func refusal(what string, err error) result {
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EPROTONOSUPPORT) {
		return unsupported("%s: %v", what, err)
	}
	return held("%s: %v", what, err)
}

type args struct {
	secret, marker, cred, meta, egress, dns string
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "victim" {
		time.Sleep(10 * time.Minute)
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "run" {
		fmt.Fprintln(os.Stderr, "usage: probe run [flags] | probe victim MARKER")
		os.Exit(2)
	}
	var a args
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	fs.StringVar(&a.secret, "secret", "", "the victim's secret")
	fs.StringVar(&a.marker, "marker", "", "the victim's marker argument")
	fs.StringVar(&a.cred, "cred", "", "host path of the planted credential")
	fs.StringVar(&a.meta, "meta", "", "the metadata stand-in, ip:port")
	fs.StringVar(&a.egress, "egress", "", "a server outside, ip:port")
	fs.StringVar(&a.dns, "dns", "", "a resolver outside, ip:port")
	_ = fs.Parse(os.Args[2:])
	for _, s := range []struct {
		id string
		f  func(args) result
	}{
		{"mount", mountProbe},
		{"docker-socket", dockerSocket},
		{"block-device", blockDevice},
		{"planted-credential", plantedCredential},
		{"proc-sys-write", procSysWrite},
		{"sys-write", sysWrite},
		{"cgroup-release-agent", releaseAgent},
		{"open-by-handle", openByHandle},
		{"host-process", hostProcess},
		{"kernel-module", kernelModule},
		{"bpf-load", bpfLoad},
		{"packet-socket", packetSocket},
		{"io-uring", ioURing},
		{"metadata", func(a args) result { return dial("metadata", a.meta, "metadata-") }},
		{"egress-direct", func(a args) result { return dial("egress", a.egress, "") }},
		{"egress-dns", dnsExfil},
	} {
		r := s.f(a)
		fmt.Printf("%s\t%s\t%s\n", s.id, r.state, strings.ReplaceAll(r.detail, "\n", " "))
	}
}

// mountProbe: CAP_SYS_ADMIN (privileged, or the capability added) lets
// the container mount filesystems, the first step of most escapes below.
func mountProbe(args) result {
	dir, err := os.MkdirTemp("", "escape-mnt-")
	if err != nil {
		return held("mkdir: %v", err)
	}
	defer func() { _ = os.Remove(dir) }()
	if err := unix.Mount("escape", dir, "tmpfs", 0, "size=1m"); err != nil {
		return refusal("mount tmpfs", err)
	}
	_ = unix.Unmount(dir, unix.MNT_DETACH)
	return escaped("mounted a tmpfs")
}

// dockerSocket: the daemon's socket is root on the host.
func dockerSocket(args) result {
	var last error
	for _, p := range []string{"/var/run/docker.sock", "/run/docker.sock"} {
		c, err := net.DialTimeout("unix", p, 2*time.Second)
		if err != nil {
			last = err
			continue
		}
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		_, _ = io.WriteString(c, "GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
		raw, _ := io.ReadAll(io.LimitReader(c, 4096))
		_ = c.Close()
		if strings.Contains(string(raw), "200 OK") {
			return escaped("%s answered /_ping", p)
		}
		last = fmt.Errorf("%s: no answer", p)
	}
	if errors.Is(last, os.ErrNotExist) || errors.Is(last, unix.ENOENT) {
		return held("no daemon socket in view")
	}
	return held("%v", last)
}

// blockDevice: the host's disk opened raw (mknod'd when /dev lacks it)
// is every file on the host.
func blockDevice(args) result {
	raw, err := os.ReadFile("/proc/partitions")
	if errors.Is(err, os.ErrNotExist) {
		return unsupported("read /proc/partitions: %v", err)
	} else if err != nil {
		return held("read /proc/partitions: %v", err)
	}
	var errs []string
	for _, line := range strings.Split(string(raw), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		major, _ := strconv.Atoi(f[0])
		minor, _ := strconv.Atoi(f[1])
		for _, p := range []string{"/dev/" + f[3], filepath.Join(os.TempDir(), "escape-blk-"+f[3])} {
			if !strings.HasPrefix(p, "/dev/") {
				if err := unix.Mknod(p, unix.S_IFBLK|0o600, int(unix.Mkdev(uint32(major), uint32(minor)))); err != nil {
					errs = append(errs, fmt.Sprintf("mknod %s: %v", f[3], err))
					continue
				}
				defer func(p string) { _ = os.Remove(p) }(p)
			}
			fd, err := unix.Open(p, unix.O_RDONLY, 0)
			if err != nil {
				errs = append(errs, fmt.Sprintf("open %s: %v", p, err))
				continue
			}
			_ = unix.Close(fd)
			return escaped("opened the host disk %s", p)
		}
	}
	if len(errs) == 0 {
		return unsupported("no partitions listed")
	}
	return held("%s", strings.Join(errs, "; "))
}

// plantedCredential: a token the host keeps outside the workspace, at its
// own path (host mode) or through a host directory mounted in.
func plantedCredential(a args) result {
	var last error
	for _, p := range []string{a.cred, filepath.Join("/host", a.cred)} {
		raw, err := os.ReadFile(p)
		if err == nil && len(raw) > 0 {
			return escaped("read %s", p)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) || last == nil {
			last = err
		}
	}
	if errors.Is(last, os.ErrNotExist) {
		return held("not in view")
	}
	return held("%v", last)
}

// openForWrite opens the first of paths it can for writing, and closes it
// unwritten. Its error joins every path's; it wraps ENOENT only when no
// path exists at all.
func openForWrite(paths ...string) (string, error) {
	if len(paths) == 0 {
		return "", os.ErrNotExist
	}
	var errs []string
	missing := true
	for _, p := range paths {
		fd, err := unix.Open(p, unix.O_WRONLY, 0)
		if err == nil {
			_ = unix.Close(fd) // opened, never written
			return p, nil
		}
		missing = missing && errors.Is(err, unix.ENOENT)
		errs = append(errs, fmt.Sprintf("%s: %v", p, err))
	}
	err := errors.New(strings.Join(errs, "; "))
	if missing {
		err = fmt.Errorf("%w: %w", os.ErrNotExist, err)
	}
	return "", err
}

// procSysWrite: core_pattern names a program the host kernel runs as root.
func procSysWrite(args) result {
	p, err := openForWrite("/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return unsupported("%v", err)
		}
		return held("open for writing: %v", err)
	}
	return escaped("%s opened for writing", p)
}

// sysWrite: sysfs writable (uevent_helper, a hotplug program run as root
// on the host; or any kernel knob).
func sysWrite(args) result {
	p, err := openForWrite("/sys/kernel/uevent_helper", "/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/profiling")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return unsupported("%v", err)
		}
		return held("open for writing: %v", err)
	}
	return escaped("%s opened for writing", p)
}

// releaseAgent: a cgroup v1 release_agent names a program the host runs as
// root when the cgroup empties. Either a writable one is in view, or a
// named v1 hierarchy can be mounted to get one.
func releaseAgent(args) result {
	matches, _ := filepath.Glob("/sys/fs/cgroup/*/release_agent")
	if p, err := openForWrite(matches...); err == nil {
		return escaped("%s opened for writing", p)
	}
	dir, err := os.MkdirTemp("", "escape-cg-")
	if err != nil {
		return held("mkdir: %v", err)
	}
	defer func() { _ = os.Remove(dir) }()
	if err := unix.Mount("escape", dir, "cgroup", 0, "none,name=meepaescape"); err != nil {
		return refusal("mount a cgroup v1 hierarchy", err)
	}
	defer func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }()
	if p, err := openForWrite(filepath.Join(dir, "release_agent")); err == nil {
		return escaped("mounted a cgroup v1 hierarchy; %s opened for writing", filepath.Base(p))
	} else {
		return held("mounted a hierarchy, but %v", err)
	}
}

// openByHandle: with CAP_DAC_READ_SEARCH, open_by_handle_at opens any inode
// of a host filesystem by number (the "shocker" escape): a handle of the
// host-backed /etc/hosts is taken and opened back.
func openByHandle(args) result {
	var last error
	for _, p := range []string{"/etc/hosts", "/etc/resolv.conf", "/"} {
		h, mnt, err := unix.NameToHandleAt(unix.AT_FDCWD, p, 0)
		if err != nil {
			last = fmt.Errorf("name_to_handle_at %s: %w", p, err)
			continue
		}
		dirfd, err := unix.Open(p, unix.O_RDONLY, 0)
		if err != nil {
			last = err
			continue
		}
		fd, err := unix.OpenByHandleAt(dirfd, h, unix.O_RDONLY)
		_ = unix.Close(dirfd)
		if err == nil {
			_ = unix.Close(fd)
			return escaped("open_by_handle_at opened %s by handle (mount %d)", p, mnt)
		}
		last = fmt.Errorf("open_by_handle_at %s: %w", p, err)
		if errors.Is(err, unix.EPERM) {
			break
		}
	}
	if errors.Is(last, unix.EOPNOTSUPP) {
		return unsupported("%v", last)
	}
	return refusal("handle", last)
}

// hostProcess: a process outside the sandbox (the victim the test starts,
// with a secret in its environment) seen, its environment read, ptrace
// attached.
func hostProcess(a args) result {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return held("read /proc: %v", err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(cmd), a.marker) {
			continue
		}
		env, eerr := os.ReadFile("/proc/" + e.Name() + "/environ")
		if eerr == nil && strings.Contains(string(env), a.secret) {
			return escaped("read the secret in pid %d's environment", pid)
		}
		if perr := unix.PtraceAttach(pid); perr == nil {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
			_ = unix.PtraceDetach(pid)
			return escaped("ptrace attached to pid %d", pid)
		} else {
			return held("pid %d in view, but environ: %v; ptrace: %v", pid, eerr, perr)
		}
	}
	return held("no process outside the sandbox in view")
}

// kernelModule: init_module with an empty image. A caller allowed to load
// modules gets past the permission check to the image's parse (ENOEXEC or
// EINVAL); one that is not gets EPERM.
func kernelModule(args) result {
	buf := []byte{0}
	param := []byte{0}
	_, _, e := unix.Syscall(unix.SYS_INIT_MODULE, uintptr(unsafe.Pointer(&buf[0])), 0, uintptr(unsafe.Pointer(&param[0])))
	switch e {
	case unix.EPERM, unix.EACCES:
		return held("init_module: %v", e)
	case unix.ENOSYS:
		return unsupported("init_module: %v (no module support)", e)
	case 0:
		return escaped("init_module accepted an empty image")
	}
	return escaped("init_module got past the permission check (%v on an empty image)", e)
}

// bpfLoad: a two-instruction socket filter (r0 = 0; exit). Root outside a
// sandbox, or CAP_SYS_ADMIN/CAP_BPF, may load programs; the kernel's BPF
// verifier is a well-trodden path to kernel code execution.
func bpfLoad(args) result {
	insns := []uint64{0x00000000000000b7, 0x0000000000000095} // mov r0,0; exit
	lic := []byte("GPL\x00")
	attr := struct {
		progType, insnCnt uint32
		insns, license    uint64
		logLevel, logSize uint32
		logBuf            uint64
		kernVersion       uint32
		_                 [100]byte
	}{progType: 1, insnCnt: 2, insns: uint64(uintptr(unsafe.Pointer(&insns[0]))), license: uint64(uintptr(unsafe.Pointer(&lic[0])))}
	fd, _, e := unix.Syscall(unix.SYS_BPF, 5 /* BPF_PROG_LOAD */, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if e != 0 {
		return refusal("bpf(BPF_PROG_LOAD)", e)
	}
	_ = unix.Close(int(fd))
	return escaped("loaded a BPF socket filter")
}

// packetSocket: CAP_NET_RAW (Docker grants it by default) opens packet
// and raw IP sockets: spoofing, sniffing, and the packet-socket kernel bugs.
func packetSocket(args) result {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
	if err == nil {
		_ = unix.Close(fd)
		return escaped("opened an AF_PACKET socket")
	}
	fd2, err2 := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	if err2 == nil {
		_ = unix.Close(fd2)
		return escaped("opened a raw ICMP socket (AF_PACKET: %v)", err)
	}
	return refusal("AF_PACKET: "+err.Error()+"; raw IP", err2)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// ioURing: io_uring_setup, a large kernel attack surface of its own.
func ioURing(args) result {
	var params [120]byte
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 8, uintptr(unsafe.Pointer(&params[0])), 0)
	if e != 0 {
		return refusal("io_uring_setup", e)
	}
	_ = unix.Close(int(fd))
	return escaped("set up an io_uring")
}

// dial connects to addr and reads a line; want, if set, must begin it.
func dial(what, addr, want string) result {
	if addr == "" {
		return unsupported("no %s address given", what)
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return held("connect %s: %v", addr, err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	if want != "" && !strings.HasPrefix(line, want) {
		return held("connected to %s but no %q banner (%q)", addr, want, line)
	}
	return escaped("reached %s", addr)
}

// dnsExfil: a query sent straight to a resolver outside, the data in the
// name.
func dnsExfil(a args) result {
	if a.dns == "" {
		return unsupported("no resolver given")
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", a.dns)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	addrs, err := r.LookupHost(ctx, "exfil.test")
	if err != nil {
		return held("query: %v", err)
	}
	return escaped("the resolver at %s answered %v", a.dns, addrs)
}
