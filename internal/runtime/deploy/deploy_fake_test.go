package deploy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
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

// recordingDaemon answers create (409 for the first `conflicts` creates,
// as the daemon does for a name in use), start, stop, remove and list, and
// records each call as "METHOD /path".
func recordingDaemon(t *testing.T, conflicts int) (client.APIClient, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if i := strings.Index(p, "/containers"); i >= 0 {
			p = p[i:]
		}
		mu.Lock()
		calls = append(calls, r.Method+" "+p)
		refuse := false
		if r.Method == http.MethodPost && p == "/containers/create" && conflicts > 0 {
			conflicts--
			refuse = true
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case refuse:
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"message":"Conflict. The container name is already in use"}`))
		case r.Method == http.MethodGet && p == "/containers/json":
			_, _ = w.Write([]byte("[]"))
		case r.Method == http.MethodPost && p == "/containers/create":
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"Id":"newrunner"}`))
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(srv.Close)
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+strings.TrimPrefix(srv.URL, "http://")), client.WithVersion("1.41"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), calls...)
	}
}

// A fresh agent's runner is created and started with no removal round
// trips; a name the daemon refuses (a runner left by a crashed run) is
// stopped, removed, its orphans listed, and the create done again; a
// replacement still removes first.
func TestDeployFreshSkipsRemoval(t *testing.T) {
	d := Deployment{AgentID: "a1", Image: "img", Layout: LayoutFor("/state", "a1"), Workspace: "/state/agents/a1", Fresh: true}
	name := "/containers/" + ContainerName("a1")
	cases := []struct {
		name      string
		fresh     bool
		conflicts int
		want      []string
	}{
		{"fresh", true, 0, []string{"POST /containers/create", "POST /containers/newrunner/start"}},
		{"fresh, name in use", true, 1, []string{"POST /containers/create", "POST " + name + "/stop", "DELETE " + name,
			"GET /containers/json", "POST /containers/create", "POST /containers/newrunner/start"}},
		{"replacement", false, 0, []string{"POST " + name + "/stop", "DELETE " + name,
			"GET /containers/json", "POST /containers/create", "POST /containers/newrunner/start"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cli, calls := recordingDaemon(t, c.conflicts)
			d := d
			d.Fresh = c.fresh
			id, err := Deploy(context.Background(), cli, d)
			if err != nil || id != "newrunner" {
				t.Fatalf("Deploy = %q, %v", id, err)
			}
			if got := calls(); !slices.Equal(got, c.want) {
				t.Errorf("calls\n %q\nwant\n %q", got, c.want)
			}
		})
	}
	// A name refused twice (a concurrent apply won it) is an error.
	cli, _ := recordingDaemon(t, 2)
	if _, err := Deploy(context.Background(), cli, d); err == nil || !strings.Contains(err.Error(), "runner create") {
		t.Errorf("Deploy with the name taken twice = %v", err)
	}
}
