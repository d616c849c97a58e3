package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a service's stderr: os/exec copies into it while the
// test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// unixClient reaches a runner on its unix socket (any URL host).
func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// waitUp polls /healthz until the runner answers at all, for up to wait;
// logs, when not nil, says what the runner printed, for the failure.
func waitUp(t *testing.T, c *http.Client, wait time.Duration, logs func() string) {
	t.Helper()
	for deadline := time.Now().Add(wait); ; {
		resp, err := c.Get("http://runner/healthz")
		if err == nil {
			_ = resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			printed := ""
			if logs != nil {
				printed = logs()
			}
			t.Fatalf("runner did not come up: %v\n%s", err, printed)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logged waits for want to appear in logs: the runner writes a message's
// audit line once its reply is out, so a test that just got the reply may
// be ahead of it.
func logged(logs *lockedBuffer, want string) bool {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(logs.String(), want) {
			return true
		}
	}
	return false
}
