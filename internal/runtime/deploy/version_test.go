package deploy

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
	"github.com/bogpad/terraform-provider-meepa/internal/version"
)

// healthServer answers /healthz on loopback with body, as a runner would,
// and returns its listen address.
func healthServer(t *testing.T, body []byte) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(ts.Close)
	_, port, err := net.SplitHostPort(ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + port
}

// runnerHealth is the body the runner's own Health type marshals to, so a
// renamed JSON field on either side fails here.
func runnerHealth(t *testing.T, v, c string) []byte {
	t.Helper()
	raw, err := json.Marshal(runner.Health{OK: true, AgentID: "a", Mode: "container", Version: v, Commit: c})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestRunnerVersionDrift(t *testing.T) {
	ctx := context.Background()
	same := healthServer(t, runnerHealth(t, version.Version, version.Commit))
	if d := RunnerVersionDrift(ctx, same); d != nil {
		t.Fatalf("same build: drift %v", d)
	}

	other := healthServer(t, runnerHealth(t, "0.0.1-old", "0ld0000"))
	d := RunnerVersionDrift(ctx, other)
	if d == nil {
		t.Fatal("another version: no drift")
	}
	if d.Runner != (version.Info{Version: "0.0.1-old", Commit: "0ld0000"}) || d.Provider != version.Current() {
		t.Errorf("drift = %+v", d)
	}
	if msg := d.Error(); !strings.Contains(msg, "0.0.1-old (commit 0ld0000)") || !strings.Contains(msg, version.Current().String()) {
		t.Errorf("message %q names neither build", msg)
	}

	// Same version, another commit: a snapshot of the same release.
	commit := healthServer(t, runnerHealth(t, version.Version, version.Commit+"x"))
	if RunnerVersionDrift(ctx, commit) == nil {
		t.Error("another commit: no drift")
	}

	// A runner from before /healthz carried the build.
	old := healthServer(t, []byte(`{"ok":true,"agent_id":"a","mode":"container"}`))
	d = RunnerVersionDrift(ctx, old)
	if d == nil || !strings.Contains(d.Error(), "too old to report") {
		t.Errorf("old runner: drift %v", d)
	}
}

func TestRunnerVersionDriftUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	// Nothing listens: the container's state reports that, not a version.
	if d := RunnerVersionDrift(context.Background(), "127.0.0.1:"+strconv.Itoa(port)); d != nil {
		t.Errorf("unreachable runner: drift %v", d)
	}
	if d := RunnerVersionDrift(context.Background(), "not a listen address"); d != nil {
		t.Errorf("bad listen: drift %v", d)
	}
}
