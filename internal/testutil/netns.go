package testutil

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Outside is a stand-in for the internet that never leaves the machine: a
// network namespace joined to the host by a veth pair, with addresses from
// the benchmarking range 198.18.0.0/15 (RFC 2544), and TCP servers in it
// that greet with a banner naming their port ("outside-443").
type Outside struct {
	NS       string // namespace name (ip netns)
	HostIP   string // host end of the veth, e.g. 198.18.117.1
	IP       string // the namespace's address, e.g. 198.18.117.2
	Prefix   string // e.g. 198.18.117.0/24
	HostVeth string
}

// Addr is ip:port of a server in the namespace.
func (o *Outside) Addr(port int) string { return fmt.Sprintf("%s:%d", o.IP, port) }

// StartOutside creates the namespace and veth, starts banner servers on the
// given ports inside it, and removes everything in t.Cleanup. The /24 is
// picked at random among 198.18.100–250 so parallel test processes do not
// collide; a taken one is skipped.
func StartOutside(t testing.TB, ports ...int) *Outside {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (ip)")
	}
	var o *Outside
	for try := 0; try < 20 && o == nil; try++ {
		n := 100 + rand.IntN(150)
		prefix := fmt.Sprintf("198.18.%d.0/24", n)
		if routeTaken(prefix) {
			continue
		}
		o = vethNS(t, "out", fmt.Sprintf("198.18.%d.1", n), fmt.Sprintf("198.18.%d.2", n), 24)
		o.Prefix = prefix
	}
	if o == nil {
		t.Fatal("no free 198.18.x.0/24 for the outside namespace")
	}
	for _, p := range ports {
		serveBanner(t, o.NS, o.Addr(p), fmt.Sprintf("outside-%d\n", p))
	}
	return o
}

func routeTaken(prefix string) bool {
	out, err := exec.Command("ip", "-4", "route", "show", prefix).Output()
	return err != nil || len(strings.TrimSpace(string(out))) > 0
}

// listenInNetns opens a TCP listener inside the namespace at nsPath.
func listenInNetns(nsPath, addr string) (net.Listener, error) {
	return inNetns(nsPath, func() (net.Listener, error) { return net.Listen("tcp", addr) })
}

// inNetns opens a socket inside the namespace at nsPath. A socket belongs
// to the namespace of the thread that created it, so a goroutine of its
// own locks a thread, switches in, opens and switches back; the socket
// then serves from any goroutine. If switching back fails, that goroutine
// exits with its thread still locked, so the runtime discards the thread
// instead of running the caller (or anyone) in the wrong namespace.
func inNetns[T io.Closer](nsPath string, open func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		v, home, err := openOnLockedThread(nsPath, open)
		if home {
			runtime.UnlockOSThread()
		}
		done <- result{v, err}
	}()
	r := <-done
	return r.v, r.err
}

// openOnLockedThread does the switching for inNetns; home reports whether
// the thread is back in its own namespace.
func openOnLockedThread[T io.Closer](nsPath string, open func() (T, error)) (v T, home bool, err error) {
	var zero T
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return zero, true, err
	}
	defer func() { _ = orig.Close() }() // read-only namespace handle
	target, err := os.Open(nsPath)
	if err != nil {
		return zero, true, err
	}
	defer func() { _ = target.Close() }() // read-only namespace handle
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return zero, true, fmt.Errorf("setns: %w", err)
	}
	v, err = open()
	if berr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); berr != nil {
		berr = fmt.Errorf("setns back: %w", berr)
		if err == nil {
			berr = errors.Join(berr, v.Close())
		}
		return zero, false, berr
	}
	return v, true, err
}

// HostService listens on all host addresses at a free port and accepts
// connections; a container that reaches it through its bridge gateway
// gets the banner "host-service". It returns the port.
func HostService(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	Cleanup(t, "close listener", func() error { return Gone(ln.Close()) })
	go acceptBanners(ln, "host-service\n")
	return ln.Addr().(*net.TCPAddr).Port
}

// ServeHTTP answers every HTTP request to the namespace's port with body
// (text/plain, 200), until the test ends: an allowed web host for fetches
// through the proxy.
func (o *Outside) ServeHTTP(t testing.TB, port int, body string) {
	t.Helper()
	ln, err := listenInNetns("/run/netns/"+o.NS, o.Addr(port))
	if err != nil {
		t.Fatalf("listen in %s: %v", o.NS, err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, body) // a failed write shows as a short body in the test
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	Cleanup(t, "stop the outside web server", func() error { return srv.Close() })
	go func() { _ = srv.Serve(ln) }() // returns ErrServerClosed once the test ends
}

// serveBanner listens on addr inside the namespace ns and greets every
// connection with banner, until the test ends.
func serveBanner(t testing.TB, ns, addr, banner string) {
	t.Helper()
	ln, err := listenInNetns("/run/netns/"+ns, addr)
	if err != nil {
		t.Fatalf("listen in %s: %v", ns, err)
	}
	Cleanup(t, "close listener", func() error { return Gone(ln.Close()) })
	go acceptBanners(ln, banner)
}

// acceptBanners writes banner to each connection ln accepts and closes it,
// until ln is closed.
func acceptBanners(ln net.Listener, banner string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte(banner))
		_ = c.Close() // one banner per connection
	}
}
