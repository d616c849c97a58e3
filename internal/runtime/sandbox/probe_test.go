package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

// TestMain lets the test binary double as a probe that the agent's shell
// runs inside the sandbox (`<test binary> meepa-probe <what> <arg>`), for
// what busybox cannot do: UDP, MPTCP and unix-socket clients, chown. Exit
// 0: the operation worked; 13: refused with EACCES or EPERM; 1: other error.
func TestMain(m *testing.M) {
	if len(os.Args) == 4 && os.Args[1] == "meepa-probe" {
		os.Exit(probe(os.Args[2], os.Args[3]))
	}
	code := m.Run()
	if probePath != "" {
		// A copy of the test binary left behind is a leak: a failed run,
		// as testutil.Cleanup counts one.
		if err := os.RemoveAll(filepath.Dir(probePath)); err != nil {
			fmt.Fprintln(os.Stderr, "remove the probe binary:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

func probe(what, arg string) int {
	var err error
	switch what {
	case "udp":
		var c net.Conn
		if c, err = net.Dial("udp", arg); err == nil {
			_, err = c.Write([]byte("udp-probe"))
			_ = c.Close()
		}
	case "mptcp":
		var fd int
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP); err == nil {
			var ap netipAddrPort
			if ap, err = parseAddr(arg); err == nil {
				err = unix.Connect(fd, &unix.SockaddrInet4{Port: ap.port, Addr: [4]byte{127, 0, 0, 1}})
			}
			_ = unix.Close(fd) // a probe socket: only the connect result counts
		}
	case "unix":
		var c net.Conn
		if c, err = net.Dial("unix", arg); err == nil {
			_ = c.Close()
		}
	case "setsid":
		_, err = unix.Setsid()
	case "chown":
		err = os.Chown(arg, 1, 1)
	case "chmod":
		err = os.Chmod(arg, 0o644)
	case "sctp":
		var fd int
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP); err == nil {
			_ = unix.Close(fd) // a probe socket: only the socket call's result counts
		}
	case "smc":
		var fd int
		if fd, err = unix.Socket(unix.AF_SMC, unix.SOCK_STREAM, 0); err == nil {
			_ = unix.Close(fd) // as for sctp
		}
	case "tcp-socket":
		var fd int
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0); err == nil {
			_ = unix.Close(fd) // as for sctp
		}
	case "socketpair":
		// arg: dgram, seqpacket or stream
		typ := map[string]int{"dgram": unix.SOCK_DGRAM, "seqpacket": unix.SOCK_SEQPACKET, "stream": unix.SOCK_STREAM}[arg]
		var fds [2]int
		if fds, err = unix.Socketpair(unix.AF_UNIX, typ, 0); err == nil {
			// Probe sockets: only the socketpair call's result counts.
			_ = unix.Close(fds[0])
			_ = unix.Close(fds[1])
		}
	case "ptrace":
		pid := atoi(arg)
		if err = unix.PtraceAttach(pid); err == nil {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
			_ = unix.PtraceDetach(pid)
		}
	case "vmread":
		err = vmRead(atoi(arg))
	case "procmem":
		var f *os.File
		if f, err = os.Open("/proc/" + arg + "/mem"); err == nil {
			_ = f.Close() // read-only: only the open counts
		}
	case "userns":
		err = unix.Unshare(unix.CLONE_NEWUSER)
	case "keyctl":
		_, err = unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, true)
	case "bpf":
		_, _, e := unix.Syscall(unix.SYS_BPF, 0, 0, 0)
		if e != 0 {
			err = e
		}
	case "userfaultfd":
		fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, 0, 0, 0)
		if e != 0 {
			err = e
		} else {
			_ = unix.Close(int(fd)) // only the userfaultfd call's result counts
		}
	default:
		err = fmt.Errorf("unknown probe %q", what)
	}
	if err == nil {
		fmt.Println("probe worked")
		return 0
	}
	fmt.Println("probe:", err)
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		return 13
	}
	return 1
}

func atoi(s string) int {
	var n int
	_, _ = fmt.Sscanf(s, "%d", &n)
	return n
}

// vmRead reads 8 bytes of pid's memory with process_vm_readv, at the start
// of its first mapping when its maps can be read, else where a static Go
// binary's text starts on amd64.
func vmRead(pid int) error {
	addr := uintptr(0x401000)
	if raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid)); err == nil {
		var lo uint64
		if _, err := fmt.Sscanf(string(raw), "%x-", &lo); err == nil {
			addr = uintptr(lo)
		}
	}
	buf := make([]byte, 8)
	local := []unix.Iovec{{Base: &buf[0], Len: 8}}
	remote := []unix.RemoteIovec{{Base: addr, Len: 8}}
	_, err := unix.ProcessVMReadv(pid, local, remote, 0)
	return err
}

type netipAddrPort struct{ port int }

func parseAddr(s string) (netipAddrPort, error) {
	_, p, err := net.SplitHostPort(s)
	if err != nil {
		return netipAddrPort{}, err
	}
	var n int
	_, err = fmt.Sscanf(p, "%d", &n)
	return netipAddrPort{port: n}, err
}

// probeHost is a host backend that may run this test binary.
func probeHost(t *testing.T, allowNetwork bool) (*Host, string) {
	t.Helper()
	exe := probeBinary(t)
	h, _ := newHost(t, landlock.FileAccess{AllowRead: []string{exe}, AllowNetwork: allowNetwork})
	return h, exe
}

var (
	probeOnce sync.Once
	probePath string
	probeErr  error
)

// probeBinary is a copy of this test binary where the agent's own uid can
// run it (go test's build directory is 0700); TestMain removes it.
func probeBinary(t *testing.T) string {
	t.Helper()
	probeOnce.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			probeErr = err
			return
		}
		raw, err := os.ReadFile(exe)
		if err != nil {
			probeErr = err
			return
		}
		dir, err := os.MkdirTemp("", "meepa-probe-")
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			probeErr = err
			return
		}
		probePath = filepath.Join(dir, "probe")
		probeErr = os.WriteFile(probePath, raw, 0o755)
	})
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	return probePath
}

func TestHostSocketFilter(t *testing.T) {
	requireLandlock(t, landlock.MinNetABI)
	h, exe := probeHost(t, false)

	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = udp.Close() }()
	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tcp.Close() }()
	sockDir := t.TempDir()
	sock := filepath.Join(sockDir, "s.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ul.Close() }()

	for _, p := range []struct{ what, arg string }{
		{"udp", udp.LocalAddr().String()},
		{"mptcp", tcp.Addr().String()},
		// Before Landlock ABI 9 only the socket filter stops this (think
		// of the Docker daemon's socket).
		{"unix", sock},
	} {
		code, out := shell(t, h, fmt.Sprintf("%s meepa-probe %s %s", exe, p.what, p.arg))
		if code != 13 {
			t.Errorf("allow_network = false, %s probe: exit %d, want 13 (refused); output: %s", p.what, code, out)
		}
	}
	buf := make([]byte, 64)
	_ = udp.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, _, err := udp.ReadFrom(buf); err == nil {
		t.Errorf("the UDP server received %q from a sandbox without network", buf[:n])
	}

	// With the network allowed, UDP works (the filter only keeps AF_UNIX
	// and io_uring away), so the probe itself is sound.
	h2, _ := probeHost(t, true)
	if code, out := shell(t, h2, fmt.Sprintf("%s meepa-probe udp %s", exe, udp.LocalAddr())); code != 0 {
		t.Errorf("allow_network = true, udp probe: exit %d: %s", code, out)
	}
	_ = udp.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _, err := udp.ReadFrom(buf); err != nil || string(buf[:n]) != "udp-probe" {
		t.Errorf("the UDP server got %q, %v; want the probe's datagram", buf[:n], err)
	}
	if code, out := shell(t, h2, fmt.Sprintf("%s meepa-probe unix %s", exe, sock)); code != 13 {
		t.Errorf("allow_network = true, unix probe: exit %d, want 13 (unix sockets are always refused); output: %s", code, out)
	}
	// Nothing leaves the session the backend finds the agent's processes
	// by (the probe runs as a group leader's child, so setsid would work).
	if code, out := shell(t, h2, exe+" meepa-probe setsid x"); code != 13 {
		t.Errorf("setsid from the sandbox: exit %d, want 13; output: %s", code, out)
	}
	// The Docker daemon's socket, when this machine has one: the runner
	// container mounts it, and it is root on the host.
	if c, err := net.Dial("unix", "/var/run/docker.sock"); err == nil {
		_ = c.Close()
		if code, out := shell(t, h2, exe+" meepa-probe unix /var/run/docker.sock"); code != 13 {
			t.Errorf("docker.sock from the sandbox: exit %d, want 13; output: %s", code, out)
		}
	}
}

func TestHostDropsCapabilities(t *testing.T) {
	requireLandlock(t, landlock.MinFSABI)
	if os.Geteuid() != 0 {
		t.Skip("capabilities matter when the runner is root")
	}
	h, exe := probeHost(t, true)
	// chown needs CAP_CHOWN, which a root runner has and its agent must not.
	code, out := shell(t, h, "echo x > owned.txt && "+exe+" meepa-probe chown owned.txt")
	if code != 13 || !strings.Contains(out, "not permitted") {
		t.Errorf("chown in the workspace: exit %d, output %q; want EPERM (no capabilities)", code, out)
	}
}
