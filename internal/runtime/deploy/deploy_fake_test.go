package deploy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/client"
)

// fakeDaemon answers the Engine API calls Deploy makes: the old runner is
// missing, create succeeds, start fails, and remove of the new container
// answers removeStatus. It records the removals.
func fakeDaemon(t *testing.T, removeStatus int) (client.APIClient, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var removed []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if i := strings.Index(p, "/containers"); i >= 0 {
			p = p[i:]
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && p == "/containers/json":
			_, _ = w.Write([]byte("[]"))
		case r.Method == http.MethodPost && p == "/containers/create":
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"Id":"newrunner"}`))
		case r.Method == http.MethodPost && p == "/containers/newrunner/start":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"message":"start refused"}`))
		case r.Method == http.MethodDelete && p == "/containers/newrunner":
			mu.Lock()
			removed = append(removed, "newrunner")
			mu.Unlock()
			w.WriteHeader(removeStatus)
			if removeStatus >= 300 {
				_, _ = w.Write([]byte(`{"message":"remove refused"}`))
			}
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"message":"no such container"}`))
		}
	}))
	t.Cleanup(srv.Close)
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+strings.TrimPrefix(srv.URL, "http://")), client.WithVersion("1.41"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cli.Close(); err != nil {
			t.Errorf("cleanup: docker client close: %v", err)
		}
	})
	return cli, &removed
}

// A runner that fails to start is removed, and a removal that fails too is
// reported beside the start error rather than dropped.
func TestDeployRemovesARunnerThatFailsToStart(t *testing.T) {
	d := Deployment{AgentID: "a1", Image: "img", Layout: LayoutFor("/state", "a1"), Workspace: "/state/agents/a1"}

	cli, removed := fakeDaemon(t, http.StatusNoContent)
	_, err := Deploy(context.Background(), cli, d)
	if err == nil || !strings.Contains(err.Error(), "runner start") || len(*removed) != 1 {
		t.Fatalf("Deploy = %v, removed %v; want the start error and the container removed", err, *removed)
	}
	if strings.Contains(err.Error(), "remove") {
		t.Errorf("a removal that succeeded is reported: %v", err)
	}

	cli, removed = fakeDaemon(t, http.StatusInternalServerError)
	_, err = Deploy(context.Background(), cli, d)
	if err == nil || !strings.Contains(err.Error(), "runner start") || !strings.Contains(err.Error(), "remove the failed runner") || len(*removed) != 1 {
		t.Errorf("Deploy with a failing removal = %v, removed %v; want both errors", err, *removed)
	}
}
