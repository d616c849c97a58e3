package firewall

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpenWithoutIptables(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Open(context.Background(), nil)
	if !errors.Is(err, ErrNoIptables) || !strings.Contains(err.Error(), "firewall.enabled = false") {
		t.Fatalf("Open without iptables = %v, want ErrNoIptables with advice", err)
	}
}

// TestOpenWithoutDockerUser runs the preflight inside a fresh network
// namespace: its iptables tables are empty, so there is no DOCKER-USER,
// and the host's own chain is never touched. The same namespace then gets
// a DOCKER-USER of its own, and Open must accept it: that shows the check
// looked at the namespace, not at the host.
func TestOpenWithoutDockerUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("needs iptables")
	}
	type result struct {
		missing, present error
		skip             string
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine instead of
		// going back to the scheduler inside the throwaway namespace.
		// iptables runs as a child of this thread, so it inherits the
		// namespace.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- result{skip: fmt.Sprintf("unshare(CLONE_NEWNET): %v", err)}
			return
		}
		var r result
		_, r.missing = Open(context.Background(), nil)
		if out, err := exec.Command("iptables", "-w", "10", "-t", "filter", "-N", DockerUser).CombinedOutput(); err != nil {
			r.present = fmt.Errorf("creating %s in the namespace: %v: %s", DockerUser, err, out)
		} else {
			_, r.present = Open(context.Background(), nil)
		}
		done <- r
	}()
	r := <-done
	if r.skip != "" {
		t.Skip(r.skip)
	}
	if !errors.Is(r.missing, ErrNoDockerUser) || !strings.Contains(r.missing.Error(), `"iptables": true`) {
		t.Errorf("Open without DOCKER-USER = %v, want ErrNoDockerUser saying how Docker creates it", r.missing)
	}
	if r.present != nil {
		t.Errorf("Open with DOCKER-USER in the namespace = %v, want no error", r.present)
	}
}
