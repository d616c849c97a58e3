package guard

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

// daemonWithNetworks answers GET /networks with nets, like a daemon would.
func daemonWithNetworks(t *testing.T, nets []network.Summary) *client.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/networks") {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotImplemented)
			return
		}
		_ = json.NewEncoder(w).Encode(nets) // a failed write fails the client's call
	}))
	t.Cleanup(srv.Close)
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+srv.Listener.Addr().String()),
		client.WithHTTPClient(srv.Client()), client.WithVersion("1.41"))
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// A daemon is this machine's when a bridge gateway sits on this machine's
// interface of that network's name. Stand-ins: "lo" with 127.0.0.1 plays a
// named bridge that matches; a user-defined network's br-<id> interface
// that does not exist here plays another daemon's.
func TestDaemonIsLocal(t *testing.T) {
	named := network.Summary{Name: "bridge", ID: "0123456789abcdef", Driver: "bridge",
		Options: map[string]string{"com.docker.network.bridge.name": "lo"},
		IPAM:    network.IPAM{Config: []network.IPAMConfig{{Gateway: "127.0.0.1"}}}}
	// A daemon just installed lists its default bridge with a subnet and
	// no gateway.
	fresh := network.Summary{Name: "bridge", ID: "0123456789abcdef", Driver: "bridge",
		Options: map[string]string{"com.docker.network.bridge.name": "lo"},
		IPAM:    network.IPAM{Config: []network.IPAMConfig{{Subnet: "127.0.0.0/8"}}}}
	freshElsewhere := fresh
	freshElsewhere.IPAM = network.IPAM{Config: []network.IPAMConfig{{Subnet: "198.51.100.0/24"}}}
	remoteUserNet := network.Summary{Name: "tg-llmnet", ID: "fedcba9876543210ffff", Driver: "bridge",
		IPAM: network.IPAM{Config: []network.IPAMConfig{{Gateway: "127.0.0.1"}}}}
	for _, c := range []struct {
		name string
		nets []network.Summary
		want bool
	}{
		{"a named bridge on its interface", []network.Summary{named}, true},
		// The same gateway on another daemon's own network: its br-<id>
		// is not here, and the id-named networks decide.
		{"another daemon's network", []network.Summary{named, remoteUserNet}, false},
		{"no bridge at all", nil, false},
		{"a fresh default bridge: its subnet on its interface", []network.Summary{fresh}, true},
		{"a fresh default bridge whose subnet is not here", []network.Summary{freshElsewhere}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			local, why, err := DaemonIsLocal(t.Context(), daemonWithNetworks(t, c.nets))
			if err != nil {
				t.Fatal(err)
			}
			if local != c.want {
				t.Fatalf("local = %v (%s), want %v", local, why, c.want)
			}
		})
	}
}
