package guard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestGuardDocker: a real guard container on the real daemon and host
// iptables. It installs the rules by itself, puts them back after they are
// deleted or altered (timed), and vouches for them only while it runs and
// has seen them: a runner's check refuses before it exists, after it is
// stopped, and passes for a topology whose firewall is off.
func TestGuardDocker(t *testing.T) {
	testutil.RequireDocker(t)
	ctx := context.Background()
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	name := fmt.Sprintf("tf-acc-gd-%04x", rand.IntN(0xffff))
	a := 3 * rand.IntN(80)
	p := firewall.Params{
		Name:      name,
		LLMNet:    netip.MustParsePrefix(fmt.Sprintf("10.214.%d.0/24", a)),
		FetchNet:  netip.MustParsePrefix(fmt.Sprintf("10.214.%d.0/24", a+1)),
		EgressNet: netip.MustParsePrefix(fmt.Sprintf("10.214.%d.0/24", a+2)),
		ProxyIP:   netip.MustParseAddr(fmt.Sprintf("10.214.%d.3", a+2)),
	}
	set := firewall.Build(p)
	h, err := firewall.Open(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A network of the topology, as the runner's check finds it: by label.
	netName := name + "-llmnet"
	if _, err := cli.NetworkCreate(ctx, netName, network.CreateOptions{Driver: "bridge", Internal: true,
		Labels: engine.Labels("network", map[string]string{"threegate": name})}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := errors.Join(guard.Remove(ctx, cli, name), h.Remove(ctx, set), cli.NetworkRemove(ctx, netName))
		if err != nil {
			t.Error(err)
		}
	})
	refused := func(when string) {
		t.Helper()
		err := guard.Enforced(ctx, cli, []string{"none", netName})
		if !errors.Is(err, sandbox.ErrNotEnforced) {
			t.Fatalf("%s: Enforced = %v, want ErrNotEnforced", when, err)
		}
		t.Logf("%s: refused: %v", when, err)
	}
	refused("before the guard exists")

	begin := time.Now()
	if err := guard.Ensure(ctx, cli, guard.Want{Topology: name, Image: image, Params: &p}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("guard created, rules installed and confirmed healthy in %s", time.Since(begin).Round(time.Millisecond))
	inSync(t, h, set, "after Ensure")
	if err := guard.Enforced(ctx, cli, []string{netName}); err != nil {
		t.Fatalf("Enforced with a healthy guard: %v", err)
	}

	// Deleted (what a flush or a boot without restore does), then altered.
	if err := h.Remove(ctx, set); err != nil {
		t.Fatal(err)
	}
	t.Logf("chains and jumps removed: rules back after %s", waitInSync(t, h, set, 10*time.Second))
	r := set.Rules[len(set.Rules)-1]
	if out, err := exec.Command("iptables", append([]string{"-D", r.Chain}, r.Args()...)...).CombinedOutput(); err != nil {
		t.Fatalf("iptables -D: %v: %s", err, out)
	}
	t.Logf("one rule deleted: back after %s", waitInSync(t, h, set, 10*time.Second))

	// Stopped guard: nothing vouches, nothing restores.
	if err := cli.ContainerStop(ctx, guard.Name(name), container.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	refused("guard stopped")
	if err := h.Remove(ctx, set); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * guard.DefaultInterval)
	if d, err := testutil.FirewallDrift(ctx, h, set); err != nil || len(d) == 0 {
		t.Fatalf("with the guard stopped the rules came back (%v) or cannot be read (%v)", d, err)
	}
	if err := guard.Ensure(ctx, cli, guard.Want{Topology: name, Image: image, Params: &p}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	inSync(t, h, set, "after restart")

	// Firewall off: the guard only marks it; members may start.
	if err := guard.Ensure(ctx, cli, guard.Want{Topology: name, Image: image}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := guard.Enforced(ctx, cli, []string{netName}); err != nil {
		t.Fatalf("Enforced with the firewall off: %v", err)
	}
}

func inSync(t *testing.T, h *firewall.Host, set firewall.Set, when string) {
	t.Helper()
	d, err := testutil.FirewallDrift(context.Background(), h, set)
	if err != nil || len(d) > 0 {
		t.Fatalf("%s: rules differ: %v %v", when, d, err)
	}
}

// waitInSync polls the host's rules until they match set and returns how
// long that took, or fails after limit.
func waitInSync(t *testing.T, h *firewall.Host, set firewall.Set, limit time.Duration) time.Duration {
	t.Helper()
	begin := time.Now()
	for {
		d, err := testutil.FirewallDrift(context.Background(), h, set)
		if err != nil {
			t.Fatal(err)
		}
		if len(d) == 0 {
			return time.Since(begin).Round(10 * time.Millisecond)
		}
		if time.Since(begin) > limit {
			t.Fatalf("rules not back within %s: %v", limit, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
