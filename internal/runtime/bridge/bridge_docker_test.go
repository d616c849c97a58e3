package bridge_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/bridge"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestManagedBridgeDocker: a per-message container with network "bridge",
// started as the runner starts it, reaches an outside server (198.18.x.x,
// which the rules leave open) and nothing else: not a service on the host,
// not another container on the same network, not 169.254.169.254. The
// embedded DNS resolver still answers. On today's main the same container
// lands on Docker's default bridge and reaches all three.
func TestManagedBridgeDocker(t *testing.T) {
	testutil.RequireDocker(t)
	ctx := context.Background()
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	hostPort := testutil.HostService(t)
	outside := testutil.StartOutside(t, 8443)
	metadata := testutil.StartLinkLocal(t, 8080)
	private := testutil.StartPrivate(t)
	resolver := private.StartDNS(t, map[string]string{"allowed.test.": "198.18.0.9"})
	resolverIP := netip.MustParseAddr(private.IP)

	// DNS: a container whose resolver is on a private address asks through
	// Docker's embedded resolver, which forwards from the container's own
	// namespace. Without that resolver among the rule set's, the query is
	// dropped with the rest of private space; with it, it is answered.
	if err := bridge.Ensure(ctx, cli, image, nil, nil); err != nil {
		t.Fatal(err)
	}
	cleanupBridge(t, cli)
	if got := lookup(t, cli, image, private.IP); strings.Contains(got, "198.18.0.9") {
		t.Fatalf("lookup through a private resolver not in the rule set was answered: %q", got)
	}
	if err := bridge.Ensure(ctx, cli, image, []netip.Addr{resolverIP}, nil); err != nil {
		t.Fatal(err)
	}
	if got := lookup(t, cli, image, private.IP); !strings.Contains(got, "198.18.0.9") || resolver.Queries.Load() == 0 {
		t.Fatalf("lookup through the host's private resolver: %q (%d queries)", got, resolver.Queries.Load())
	}
	dns := []netip.Addr{resolverIP}
	in, err := cli.NetworkInspect(ctx, sandbox.ManagedBridge, network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Idempotent: a second Ensure keeps the network.
	if err := bridge.Ensure(ctx, cli, image, dns, nil); err != nil {
		t.Fatal(err)
	}
	if again, err := cli.NetworkInspect(ctx, sandbox.ManagedBridge, network.InspectOptions{}); err != nil || again.ID != in.ID {
		t.Fatalf("second Ensure replaced the network: %v", err)
	}
	if in.EnableIPv6 || in.Options["com.docker.network.bridge.enable_icc"] != "false" || in.Labels[engine.LabelManagedBy] != engine.ManagedByValue {
		t.Fatalf("network settings: ipv6 %v options %v labels %v", in.EnableIPv6, in.Options, in.Labels)
	}
	if d, err := bridge.Drift(ctx, cli, image, dns); err != nil || len(d) > 0 {
		t.Fatalf("drift right after Ensure: %v %v", d, err)
	}
	gateway := in.IPAM.Config[0].Gateway
	peerName, peerIP := startPeer(t, cli, image)
	// Controls: every server the container fails to reach answers the
	// host, so an empty probe below means blocked, not down.
	for addr, banner := range map[string]string{
		fmt.Sprintf("127.0.0.1:%d", hostPort): "host-service", peerIP + ":8080": "peer", metadata: "metadata-8080",
	} {
		if got := dialBanner(t, addr); got != banner {
			t.Fatalf("control: %s from the host answered %q, want %q", addr, got, banner)
		}
	}

	probe := func(name, addr string) string {
		return fmt.Sprintf(`echo "%s=$(nc -w 3 %s </dev/null 2>/dev/null | head -c 40)";`, name, strings.Replace(addr, ":", " ", 1))
	}
	script := probe("outside", outside.Addr(8443)) +
		probe("host_gateway", fmt.Sprintf("%s:%d", gateway, hostPort)) +
		probe("host_veth", fmt.Sprintf("%s:%d", outside.HostIP, hostPort)) +
		probe("peer", peerIP+":8080") +
		probe("metadata", metadata) +
		// Docker's embedded resolver (127.0.0.11, inside the container's
		// own namespace) answers the peer's name.
		fmt.Sprintf(`echo "dns=$(nslookup %s 127.0.0.11 2>&1 | grep -c %s)";`, peerName, peerIP)
	d := perMessage(t, cli, image, script)
	res, err := d.Run(ctx, sandbox.Job{MessageID: "m-probe", Timeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, ln := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		k, v, _ := strings.Cut(ln, "=")
		got[k] = strings.TrimSpace(v)
	}
	t.Logf("probes: %v (stderr %q)", got, res.StderrTail)
	want := map[string]string{"outside": "outside-8443", "host_gateway": "", "host_veth": "", "peer": "", "metadata": "", "dns": "1"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}

	// Heal: the guard puts a flushed chain and a deleted jump back.
	set := firewall.BuildBridge(mustParams(t, in, dns))
	h, err := firewall.Open(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	fwd := firewall.BridgeForwardChain(sandbox.ManagedBridge)
	for _, args := range [][]string{{"-F", fwd}, append([]string{"-D", firewall.DockerUser}, set.Jumps[0].Args()...)} {
		if out, err := exec.Command("iptables", append([]string{"-w", "10"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables %v: %v: %s", args, err, out)
		}
	}
	start := time.Now()
	for {
		live, err := h.Read(ctx, set)
		if err != nil {
			t.Fatal(err)
		}
		if len(firewall.Diff(set, live)) == 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("rules not restored within 10s: %v", firewall.Diff(set, live))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("rules restored %s after the flush", time.Since(start).Round(time.Millisecond))

	// Fail closed: without the guard no container starts on the network,
	// and Read's drift says so.
	if err := guard.Remove(ctx, cli, sandbox.ManagedBridge); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(ctx, sandbox.Job{MessageID: "m-refused", Timeout: 30 * time.Second}); !errors.Is(err, sandbox.ErrNotEnforced) {
		t.Fatalf("Run without the guard: %v, want ErrNotEnforced", err)
	}
	if d, err := bridge.Drift(ctx, cli, image, dns); err != nil || len(d) == 0 {
		t.Fatalf("drift without the guard: %v %v", d, err)
	}
}

// dialBanner reads the first line a server at addr sends, retrying for a
// few seconds while it starts.
func dialBanner(t *testing.T, addr string) string {
	t.Helper()
	var last error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			last = err
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		_ = c.Close()
		if err == nil {
			return strings.TrimSpace(line)
		}
		last = err
	}
	return fmt.Sprint(last)
}

func mustParams(t *testing.T, in network.Inspect, dns []netip.Addr) firewall.BridgeParams {
	t.Helper()
	p, err := bridge.Params(in, dns)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// perMessage is the Docker backend as the runner makes it for network
// "bridge": the managed network, and the guard's check before each start.
func perMessage(t *testing.T, cli client.APIClient, image, script string) *sandbox.Docker {
	t.Helper()
	ctx := context.Background()
	spec := sandbox.Spec{
		AgentID: fmt.Sprintf("tf-acc-br-%04x", rand.IntN(0xffff)), Workspace: t.TempDir(), Image: image,
		Network: "bridge", Command: []string{"sh", "-c", script},
	}
	check := func(ctx context.Context) error { return guard.Enforced(ctx, cli, []string{sandbox.ManagedBridge}) }
	d, err := sandbox.NewDocker(ctx, cli, sandbox.DockerOptions{Spec: spec, ChownWorkspace: true, Enforcement: check})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, err := sandbox.RemoveOrphans(context.Background(), cli, spec.AgentID)
		if err = errors.Join(d.Close(context.Background()), err); err != nil {
			t.Error(err)
		}
	})
	return d
}

// lookup runs a container on the managed network whose resolver is dns and
// returns what nslookup of allowed.test through the embedded resolver says.
func lookup(t *testing.T, cli client.APIClient, image, dns string) string {
	t.Helper()
	ctx := context.Background()
	c, err := cli.ContainerCreate(ctx, &container.Config{
		Image: image, Cmd: []string{"sh", "-c", "nslookup allowed.test 127.0.0.11 2>&1"}, Labels: engine.Labels("test", nil),
	}, &container.HostConfig{NetworkMode: sandbox.ManagedBridge, DNS: []string{dns}}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Error(err)
		}
	}()
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	waitC, errC := cli.ContainerWait(wctx, c.ID, container.WaitConditionNotRunning)
	select {
	case <-waitC:
	case err := <-errC:
		t.Fatal(err)
	}
	rc, err := cli.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(rc)
	if err = errors.Join(err, rc.Close()); err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// startPeer runs another container on the managed network that greets
// "peer" on port 8080, and returns its name and address.
func startPeer(t *testing.T, cli client.APIClient, image string) (string, string) {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("tf-acc-br-peer-%04x", rand.IntN(0xffff))
	c, err := cli.ContainerCreate(ctx, &container.Config{
		Image: image, Cmd: []string{"sh", "-c", "while :; do echo peer | nc -l -p 8080; done"},
		Labels: engine.Labels("test", nil),
	}, &container.HostConfig{NetworkMode: sandbox.ManagedBridge}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove peer", func() error {
		return testutil.Gone(cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}))
	})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	in, err := cli.ContainerInspect(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	ep := in.NetworkSettings.Networks[sandbox.ManagedBridge]
	if ep == nil || ep.IPAddress == "" {
		t.Fatalf("peer has no address on %s", sandbox.ManagedBridge)
	}
	return name, ep.IPAddress
}

// cleanupBridge removes the guard, then the rules (the guard would put
// them back), then the network.
func cleanupBridge(t *testing.T, cli client.APIClient) {
	t.Cleanup(func() {
		ctx := context.Background()
		err := guard.Remove(ctx, cli, sandbox.ManagedBridge)
		in, ierr := cli.NetworkInspect(ctx, sandbox.ManagedBridge, network.InspectOptions{})
		switch {
		case errdefs.IsNotFound(ierr):
			// No network: nothing of its rules can be named, and none made.
		case ierr != nil:
			err = errors.Join(err, ierr)
		default:
			p, perr := bridge.Params(in, nil)
			h, herr := firewall.Open(ctx, nil)
			if perr == nil && herr == nil {
				err = errors.Join(err, h.Remove(ctx, firewall.BuildBridge(p)))
			}
			err = errors.Join(err, perr, herr)
			if rerr := cli.NetworkRemove(ctx, in.ID); rerr != nil && !errdefs.IsNotFound(rerr) {
				err = errors.Join(err, rerr)
			}
		}
		if err != nil {
			t.Error(err)
		}
	})
}
