package testutil

import (
	"errors"
	"net"
	"os"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
)

// Cleanup runs fn when t ends and fails t when fn fails, so a container,
// network, rule or file a test leaves behind is a failed test, not a
// silent leak.
func Cleanup(t testing.TB, what string, fn func() error) {
	t.Helper()
	t.Cleanup(func() {
		if err := fn(); err != nil {
			t.Errorf("cleanup: %s: %v", what, err)
		}
	})
}

// Gone treats "already gone" as done: a Docker object that is not found, a
// process that has exited, a listener or connection already closed.
func Gone(err error) error {
	if err == nil || cerrdefs.IsNotFound(err) || errors.Is(err, os.ErrProcessDone) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Must fails t at once when a step of the test's own setup fails (a file
// it writes, a link it makes): what follows would test nothing.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
