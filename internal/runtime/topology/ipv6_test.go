package topology

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"

	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// fakeNetworkDaemon answers the calls createNetwork makes, and records the
// create request; forceIPv6 makes it report IPv6 on whatever was asked.
type fakeNetworkDaemon struct {
	mu        sync.Mutex
	forceIPv6 bool
	created   map[string]any
	removed   []string
}

func (f *fakeNetworkDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := r.URL.Path
	if i := strings.Index(p[1:], "/"); strings.HasPrefix(p, "/v1.") && i > 0 {
		p = p[i+1:]
	}
	switch {
	case r.Method == http.MethodPost && p == "/networks/create":
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &f.created)
		_ = json.NewEncoder(w).Encode(network.CreateResponse{ID: "n1"})
	case r.Method == http.MethodGet && p == "/networks/n1":
		v6, _ := f.created["EnableIPv6"].(bool)
		_ = json.NewEncoder(w).Encode(network.Inspect{ID: "n1", Name: "x", EnableIPv6: v6 || f.forceIPv6})
	case r.Method == http.MethodDelete && strings.HasPrefix(p, "/networks/"):
		f.removed = append(f.removed, strings.TrimPrefix(p, "/networks/"))
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "unexpected "+r.Method+" "+p, http.StatusNotImplemented)
	}
}

func fakeClient(t *testing.T, h http.Handler) *client.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+srv.Listener.Addr().String()),
		client.WithHTTPClient(srv.Client()), client.WithVersion("1.41"))
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// TestCreateNetworkIPv6Off: every network is created with IPv6 off said
// explicitly (a daemon whose default network options turn IPv6 on obeys
// an explicit false), and a daemon that enables it anyway gets the network
// removed and a clear error.
func TestCreateNetworkIPv6Off(t *testing.T) {
	s, ps := Build(topospec.Input{Name: "v6", Proxy: topospec.ProxyInput{Image: "x"}})
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	f := &fakeNetworkDaemon{}
	if err := NewService(fakeClient(t, f), nil).createNetwork(context.Background(), s, s.Docker.Networks[0]); err != nil {
		t.Fatal(err)
	}
	if v, ok := f.created["EnableIPv6"]; !ok || v != false {
		t.Fatalf("create request EnableIPv6 = %v (present %t), want an explicit false", v, ok)
	}

	f = &fakeNetworkDaemon{forceIPv6: true}
	err := NewService(fakeClient(t, f), nil).createNetwork(context.Background(), s, s.Docker.Networks[0])
	if err == nil || !strings.Contains(err.Error(), "enabled IPv6") || !strings.Contains(err.Error(), "daemon.json") {
		t.Fatalf("a daemon forcing IPv6: err = %v, want a clear refusal", err)
	}
	if len(f.removed) != 1 || f.removed[0] != "n1" {
		t.Fatalf("the forced-IPv6 network was not removed: %v", f.removed)
	}
}

// TestIPv6Drift: a topology network with IPv6 on (made out of band, or by a
// daemon that ignored the request) is drift, and Ensure replaces it with
// one without IPv6.
func TestIPv6Drift(t *testing.T) {
	testutil.RequireDocker(t)
	ctx := context.Background()
	cli := testutil.Docker(t)
	in := freeInput(t, cli, "meepa-test-tgv6")
	in.Proxy = topospec.ProxyInput{Image: testutil.EnsureRunnerImage(t, cli), Allow: []string{"example.com"}}
	s, _ := Build(in)
	svc := NewService(cli, nil)
	t.Cleanup(func() {
		if err := svc.Teardown(context.WithoutCancel(ctx), s.Name); err != nil {
			t.Error(err)
		}
	})
	n := s.Network(topospec.LLMNet)
	on := true
	if _, err := cli.NetworkCreate(ctx, n.Name, network.CreateOptions{
		Driver: "bridge", Internal: n.Internal, EnableIPv6: &on,
		IPAM: &network.IPAM{Config: []network.IPAMConfig{
			{Subnet: n.Subnet.String(), Gateway: n.Gateway.String(), IPRange: n.IPRange.String()},
			{Subnet: "fd6e:7467:" + s.Name[len(s.Name)-4:] + "::/64"},
		}},
		Labels: engine.Labels("network", map[string]string{"threegate": s.Name, "threegate.kind": n.Kind}),
	}); err != nil {
		t.Fatal(err)
	}
	o, err := Observe(ctx, cli, s)
	if err != nil {
		t.Fatal(err)
	}
	drift := strings.Join(Drift(s, o), "\n")
	if !strings.Contains(drift, n.Name+" has IPv6 enabled") {
		t.Fatalf("drift does not report IPv6 on %s:\n%s", n.Name, drift)
	}
	if _, err := svc.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := cli.NetworkInspect(ctx, n.Name, network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.EnableIPv6 {
		t.Fatalf("after Ensure %s still has IPv6 on", n.Name)
	}
	for _, k := range topospec.Kinds {
		v6, err := cli.NetworkInspect(ctx, s.Network(k).Name, network.InspectOptions{})
		if err != nil || v6.EnableIPv6 {
			t.Errorf("%s: IPv6 %t err %v", s.Network(k).Name, v6.EnableIPv6, err)
		}
	}
}
