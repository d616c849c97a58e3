package guard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// BenchmarkEnforced is what the runner's check adds to every message of a
// ThreeGate member (two networks, one healthy guard): a network inspect per
// network and one container inspect.
func BenchmarkEnforced(b *testing.B) {
	testutil.RequireDocker(b)
	ctx := context.Background()
	cli := testutil.Docker(b)
	image := testutil.EnsureRunnerImage(b, cli)
	name := fmt.Sprintf("tf-acc-gb-%04x", rand.IntN(0xffff))
	a := 3 * rand.IntN(80)
	p := firewall.Params{Name: name,
		LLMNet:    netip.MustParsePrefix(fmt.Sprintf("10.215.%d.0/24", a)),
		FetchNet:  netip.MustParsePrefix(fmt.Sprintf("10.215.%d.0/24", a+1)),
		EgressNet: netip.MustParsePrefix(fmt.Sprintf("10.215.%d.0/24", a+2)),
		ProxyIP:   netip.MustParseAddr(fmt.Sprintf("10.215.%d.3", a+2))}
	h, err := firewall.Open(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	var nets []string
	for _, k := range []string{"llmnet", "fetchnet"} {
		n := name + "-" + k
		if _, err := cli.NetworkCreate(ctx, n, network.CreateOptions{Driver: "bridge", Internal: true,
			Labels: engine.Labels("network", map[string]string{"threegate": name})}); err != nil {
			b.Fatal(err)
		}
		nets = append(nets, n)
	}
	b.Cleanup(func() {
		_ = guard.Remove(ctx, cli, name)
		_ = h.Remove(ctx, firewall.Build(p))
		for _, n := range nets {
			_ = cli.NetworkRemove(ctx, n)
		}
	})
	if err := guard.Ensure(ctx, cli, guard.Want{Topology: name, Image: image, Params: &p}, 30*time.Second); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := guard.Enforced(ctx, cli, nets); err != nil {
			b.Fatal(err)
		}
	}
}
