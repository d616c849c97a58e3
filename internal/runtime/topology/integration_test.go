package topology

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/probe"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// freeInput picks a unique name and three free /24s in 10.213.0.0/16.
func freeInput(t *testing.T, cli client.APIClient, prefix string) topospec.Input {
	t.Helper()
	if swept, err := testutil.SweepTopologies(context.Background(), cli, LabelTopology, "meepa-test-tg", time.Hour,
		NewService(cli, nil).Teardown); err != nil || len(swept) > 0 {
		t.Logf("swept stale test topologies %v (err %v)", swept, err)
	}
	for try := 0; try < 30; try++ {
		a := 3 * rand.IntN(80)
		in := topospec.Input{
			Name: fmt.Sprintf("%s-%04x", prefix, rand.IntN(0xffff)),
			Docker: topospec.DockerInput{Subnets: map[string]string{topospec.LLMNet: fmt.Sprintf("10.213.%d.0/24", a),
				topospec.FetchNet: fmt.Sprintf("10.213.%d.0/24", a+1), topospec.EgressNet: fmt.Sprintf("10.213.%d.0/24", a+2)},
				Firewall: &topospec.Firewall{}},
			Proxy: topospec.ProxyInput{Image: "x"},
		}
		s, ps := Build(in)
		if len(ps) > 0 {
			t.Fatal(ps)
		}
		conflicts, err := Conflicts(context.Background(), cli, s, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(conflicts) == 0 {
			return in
		}
	}
	t.Fatal("no free subnets in 10.213.0.0/16")
	return topospec.Input{}
}

// TestThreeGateIsolation builds a real topology and proves, with probe
// containers in each role, what each can reach — first without the host
// firewall (to show the holes the firewall closes, so the test can fail),
// then with it.
func TestThreeGateIsolation(t *testing.T) {
	testutil.RequireDocker(t)
	ctx := context.Background()
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	out := testutil.StartOutside(t, 443, 8443)
	// The proxy's DNS server lives outside too, and knows one name.
	const name = "allowed.test."
	dns := out.StartDNS(t, map[string]string{name: out.IP})
	hostPort := testutil.HostService(t)

	in := freeInput(t, cli, "meepa-test-tg")
	in.Proxy = topospec.ProxyInput{Image: image, Allow: []string{out.Addr(443), "localhost:443", "allowed.test:443"},
		DNS: []string{out.IP}}
	in.Docker.AllowPrivate = []string{out.Prefix}
	in.Docker.Firewall = &topospec.Firewall{Enabled: true}
	s, ps := Build(in)
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	fw, err := firewall.Open(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := NewService(cli, nil)
	t.Cleanup(func() {
		if err := svc.Teardown(context.WithoutCancel(ctx), s.Name); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})

	// 1. Docker's topology alone.
	dockerOnly := s
	dockerOnly.Docker.Firewall.Enabled = false
	if _, err := svc.Apply(ctx, dockerOnly); err != nil {
		t.Fatal(err)
	}
	opts := topospec.VerifyOptions{Image: image, AllowedTarget: out.Addr(443), DeniedTarget: out.Addr(8443),
		OutsideAddress: out.Addr(8443), HostPort: hostPort, DNSName: name, Timeout: 2 * time.Second}
	before, err := svc.Verify(ctx, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("without the host firewall:\n%s", before.Table())
	if row := find(t, before, topospec.RoleCore, "host via llmnet gateway"); row.Observed != probe.Open {
		t.Errorf("without the firewall CORE should reach the host service through its gateway (the hole this firewall closes); observed %s %s",
			row.Observed, row.Detail)
	}
	rogue := runOn(t, cli, image, s.Network(topospec.EgressNet).Name, "tcp="+out.Addr(443))
	if rogue.Observed != probe.Open {
		t.Errorf("without the firewall a second container on egressnet should get out (Docker allows it); observed %s", rogue.Observed)
	}

	// 2. With the host firewall.
	if _, err := svc.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if drift, err := testutil.FirewallDrift(ctx, fw, Rules(s)); err != nil || len(drift) > 0 {
		t.Fatalf("after apply: drift %v, err %v", drift, err)
	}
	queriedBefore := dns.Queries.Load()
	after, err := svc.Verify(ctx, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Every role asked for the name (its DNS row) and CORE and FETCH asked
	// the outside server directly: none of it reached that server.
	if n := dns.Queries.Load() - queriedBefore; n != 0 {
		t.Errorf("the outside DNS server answered %d queries during verification", n)
	}
	t.Logf("with the host firewall:\n%s", after.Table())
	if !after.OK() {
		t.Errorf("verification failed:\n%s", after.Table())
	}
	if row := find(t, after, topospec.RoleFetch, "allowed host via proxy"); row.Detail != "outside-443" {
		t.Errorf("FETCH through the proxy should read the outside server's banner, got %q", row.Detail)
	}
	// Port 443 of the allowed host is open in the firewall for the proxy's
	// egress only: CORE and FETCH dialling it directly must still fail.
	for _, role := range []string{topospec.RoleCore, topospec.RoleFetch} {
		if row := find(t, after, role, "allowed host directly"); row.Check != "tcp="+out.Addr(443) || !probe.Blocked(row.Observed) {
			t.Errorf("%s -> %s directly should be dropped: %+v", role, out.Addr(443), row)
		}
	}
	// DNS: the proxy resolves through the outside server (FETCH gets the
	// allowed name's banner through it); CORE and FETCH cannot ask that
	// server themselves, over UDP or TCP, nor resolve the name their own
	// way; the proxy can ask it.
	asked := dns.Queries.Load()
	viaProxy := "connect=" + ProxyURL(s)[len("http://"):] + "/allowed.test:443"
	// The proxy requires a live per-message credential: without one, 407.
	if r := runOn(t, cli, image, s.Network(topospec.FetchNet).Name, viaProxy, s.Network(topospec.LLMNet).Name); r.Observed != probe.AuthRequired {
		t.Errorf("FETCH -> allowed.test:443 through the proxy without a credential: %s %q, want auth-required", r.Observed, r.Detail)
	}
	auth, err := svc.probeCredential(ctx, s, 2*time.Second)
	if err != nil || auth == "" {
		t.Fatalf("no probe credential (%v): the proxy has no egress key", err)
	}
	if r := runOnEnv(t, cli, image, s.Network(topospec.FetchNet).Name, []string{probe.EnvProxyAuthorization + "=" + auth}, viaProxy, s.Network(topospec.LLMNet).Name); r.Observed != probe.Allowed || r.Detail != "outside-443" {
		t.Errorf("FETCH -> allowed.test:443 through the proxy: %s %q, want allowed with the outside-443 banner", r.Observed, r.Detail)
	}
	if dns.Queries.Load() == asked {
		t.Error("the outside DNS server was never asked while the proxy resolved allowed.test")
	}
	for _, role := range []string{topospec.RoleCore, topospec.RoleFetch} {
		for _, what := range []string{"proxy's DNS server udp/53", "proxy's DNS server tcp/53"} {
			if row := find(t, after, role, what); !probe.Blocked(row.Observed) {
				t.Errorf("%s -> %s should be dropped: %+v", role, what, row)
			}
		}
	}
	for _, role := range []string{topospec.RoleCore, topospec.RoleFetch, topospec.RoleToolExec, topospec.RoleToolExec + "/sandbox"} {
		if row := find(t, after, role, "DNS outside name"); row.Check != "dns="+name || row.Observed != probe.NotResolved {
			t.Errorf("%s resolved %s: %+v", role, name, row)
		}
		if role == topospec.RoleToolExec+"/sandbox" {
			continue // no network, no resolver, no names
		}
		if row := find(t, after, role, "DNS topology name"); row.Observed != probe.Resolved {
			t.Errorf("%s cannot resolve its own name: %+v", role, row)
		}
	}
	pd := execProbe(t, cli, topospec.ProxyName(s.Name), "dns-at="+dns.Addr+"/"+name, "tcp="+dns.Addr)
	if pd[0].Observed != probe.Resolved || pd[0].Detail != out.IP {
		t.Errorf("proxy -> DNS server udp/53: %s %q, want %s resolved to %s", pd[0].Observed, pd[0].Detail, name, out.IP)
	}
	if pd[1].Observed != probe.Open {
		t.Errorf("proxy -> DNS server tcp/53: %s %q, want open", pd[1].Observed, pd[1].Detail)
	}
	t.Logf("PROXY      DNS server udp/53                resolved %s (%s)", pd[0].Observed, pd[0].Detail)
	t.Logf("PROXY      DNS server tcp/53                open     %s", pd[1].Observed)
	// The proxy refuses a private-range target even when the allowlist
	// names it (localhost resolves to loopback inside the proxy).
	priv := runOnEnv(t, cli, image, s.Network(topospec.FetchNet).Name, []string{probe.EnvProxyAuthorization + "=" + auth},
		"connect="+ProxyURL(s)[len("http://"):]+"/localhost:443", s.Network(topospec.LLMNet).Name)
	if priv.Observed != probe.Denied {
		t.Errorf("proxy should refuse the loopback target localhost:443: %s %s", priv.Observed, priv.Detail)
	}
	// The proxy itself: out on 443, not on another port.
	res := execProbe(t, cli, topospec.ProxyName(s.Name), "tcp="+out.Addr(443), "tcp="+out.Addr(8443))
	if res[0].Observed != probe.Open || res[0].Detail != "outside-443" {
		t.Errorf("proxy -> outside:443: %+v", res[0])
	}
	if !probe.Blocked(res[1].Observed) {
		t.Errorf("proxy -> outside:8443 should be dropped: %+v", res[1])
	}
	t.Logf("PROXY      outside:443 directly             open     %s", res[0].Observed)
	t.Logf("PROXY      outside:8443 directly            blocked  %s", res[1].Observed)
	// The proxy's tcp/443 accept must not carry it into llmnet by routing
	// (egressnet gateway -> llmnet bridge): Docker isolates internal
	// networks, and an ACCEPT in DOCKER-USER would skip that isolation. A
	// refused connection would mean the member was reached.
	member := startMember(t, cli, image, s.Network(topospec.LLMNet).Name, memberOpts{})
	if r := execProbe(t, cli, topospec.ProxyName(s.Name), "tcp="+member+":443")[0]; !probe.Blocked(r.Observed) {
		t.Errorf("proxy -> llmnet member %s:443 should be dropped; observed %s %s", member, r.Observed, r.Detail)
	}
	rogue = runOn(t, cli, image, s.Network(topospec.EgressNet).Name, "tcp="+out.Addr(443))
	if !probe.Blocked(rogue.Observed) {
		t.Errorf("a second container on egressnet must not get out: %+v", rogue)
	}
	t.Logf("ROGUE@egressnet outside:443                blocked  %s", rogue.Observed)
	// The proxy listens on its fetchnet address only: from egressnet its
	// port answers with a reset (reachable, nothing listening), so it is
	// no open proxy for whatever else lands there.
	egressPort := netip.AddrPortFrom(s.Docker.EgressIP, uint16(s.Proxy.Port)).String()
	if r := runOn(t, cli, image, s.Network(topospec.EgressNet).Name, "tcp="+egressPort); r.Observed != probe.Refused {
		t.Errorf("proxy port on its egressnet address %s: observed %s %s, want refused", egressPort, r.Observed, r.Detail)
	}
	if v, err := Violations(ctx, cli, s); err != nil || len(v) > 0 {
		t.Errorf("violations %v, err %v", v, err)
	}
	// A container on egressnet is a violation even when it wears the
	// labels of a verification probe.
	disguised := "meepa-test-tgprobe-" + s.Name[len(s.Name)-4:]
	startMember(t, cli, image, s.Network(topospec.EgressNet).Name, memberOpts{name: disguised,
		labels: engine.Labels("probe", map[string]string{"threegate": s.Name, "threegate.role": topospec.RoleFetch})})
	if v, err := Violations(ctx, cli, s); err != nil || !strings.Contains(strings.Join(v, "\n"), disguised+" is on "+s.Network(topospec.EgressNet).Name) {
		t.Errorf("a probe-labelled container on egressnet is not reported: violations %v, err %v", v, err)
	}
	removeMember(t, cli, disguised)
	// A member that turns IPv6 back on (Docker disables it in containers of
	// networks without IPv6) reaches the host over the bridge's link-local
	// address, a path the IPv4 firewall does not see: reported.
	v6 := "meepa-test-tgv6-" + s.Name[len(s.Name)-4:]
	startMember(t, cli, image, s.Network(topospec.LLMNet).Name, memberOpts{name: v6,
		sysctls: map[string]string{"net.ipv6.conf.all.disable_ipv6": "0"}})
	if v, err := Violations(ctx, cli, s); err != nil || !strings.Contains(strings.Join(v, "\n"), v6+" enables IPv6") {
		t.Errorf("a member with IPv6 enabled is not reported: violations %v, err %v", v, err)
	}
	removeMember(t, cli, v6)

	// 3. Drift on our own rules only, each restored by the next apply. The
	// guard would restore them itself between break and check (its own
	// test is in package guard), so it is stopped; step 4's apply replaces it.
	if err := cli.ContainerStop(ctx, guard.Name(s.Name), container.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	set := Rules(s)
	ipt := func(args ...string) {
		t.Helper()
		if b, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
			t.Fatalf("iptables %v: %v %s", args, err, b)
		}
	}
	jump := set.Jumps[0].Args()
	for _, c := range []struct {
		name   string
		break_ func()
		want   string
	}{
		{"deleted rule", func() { ipt(append([]string{"-D", set.Rules[3].Chain}, set.Rules[3].Args()...)...) }, "rule missing"},
		{"jump removed", func() { ipt(append([]string{"-D", firewall.DockerUser}, jump...)...) }, "jump from DOCKER-USER to " + firewall.ForwardChain(s.Name) + " is missing"},
		{"jump below RETURN", func() {
			ipt(append([]string{"-D", firewall.DockerUser}, jump...)...)
			ipt(append([]string{"-A", firewall.DockerUser}, jump...)...)
		}, "below DOCKER-USER's RETURN"},
		{"input chain emptied", func() { ipt("-F", firewall.InputChain(s.Name)) }, "rule missing"},
	} {
		c.break_()
		drift, err := testutil.FirewallDrift(ctx, fw, set)
		if err != nil || len(drift) == 0 || !strings.Contains(strings.Join(drift, "\n"), c.want) {
			t.Errorf("%s: drift %q (err %v), want it to mention %q", c.name, drift, err, c.want)
		}
		if err := fw.Apply(ctx, set); err != nil {
			t.Fatal(err)
		}
		if drift, _ := testutil.FirewallDrift(ctx, fw, set); len(drift) > 0 {
			t.Errorf("%s: not restored: %v", c.name, drift)
		}
	}

	// The operator's boot-time text, loaded into a host without our rules,
	// is exactly the wanted set.
	if err := fw.Remove(ctx, set); err != nil {
		t.Fatal(err)
	}
	restore := exec.Command("iptables-restore", "--noflush", "-w", "10")
	restore.Stdin = strings.NewReader(set.RestoreText())
	if b, err := restore.CombinedOutput(); err != nil {
		t.Fatalf("loading RestoreText: %v %s", err, b)
	}
	if drift, err := testutil.FirewallDrift(ctx, fw, set); err != nil || len(drift) > 0 {
		t.Errorf("after loading RestoreText: drift %v, err %v", drift, err)
	}

	// 4. Docker drift: a stopped proxy and a removed network come back.
	if err := cli.ContainerStop(ctx, topospec.ProxyName(s.Name), container.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	o, _ := Observe(ctx, cli, s)
	if d := Drift(s, o); len(d) != 1 || !strings.Contains(d[0], "not running") {
		t.Errorf("stopped proxy drift = %v", d)
	}
	_ = cli.NetworkDisconnect(ctx, s.Network(topospec.EgressNet).Name, topospec.ProxyName(s.Name), true)
	if err := cli.NetworkRemove(ctx, s.Network(topospec.EgressNet).Name); err != nil {
		t.Fatal(err)
	}
	o, _ = Observe(ctx, cli, s)
	if d := strings.Join(Drift(s, o), "\n"); !strings.Contains(d, "network "+s.Network(topospec.EgressNet).Name+" is missing") {
		t.Errorf("removed network drift = %v", d)
	}
	st, err := svc.ApplyHost(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if d := Drift(s, st.Observed); len(d) > 0 {
		t.Errorf("not restored: %v", d)
	}
}

func find(t *testing.T, r topospec.Report, role, what string) topospec.Probe {
	t.Helper()
	for _, p := range r.Probes {
		if p.Role == role && p.What == what {
			return p
		}
	}
	t.Fatalf("no probe %s/%s", role, what)
	return topospec.Probe{}
}

// runOn runs one probe check in a throwaway container on the given
// networks.
func runOn(t *testing.T, cli client.APIClient, image, net, check string, more ...string) probe.Result {
	t.Helper()
	return runOnEnv(t, cli, image, net, nil, check, more...)
}

// runOnEnv is runOn with the probe's environment.
func runOnEnv(t *testing.T, cli client.APIClient, image, net string, env []string, check string, more ...string) probe.Result {
	t.Helper()
	ctx := context.Background()
	pids := int64(32)
	resp, err := cli.ContainerCreate(ctx, &container.Config{
		Image: image, Entrypoint: []string{"/usr/local/bin/agent-runner"}, Cmd: []string{"probe", "--timeout", "2s", check}, Env: env,
		User: ProxyUser, Labels: engine.Labels("probe", map[string]string{"test": t.Name()}),
	}, &container.HostConfig{NetworkMode: container.NetworkMode(net), CapDrop: []string{"ALL"}, ReadonlyRootfs: true,
		Resources: container.Resources{PidsLimit: &pids}}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := testutil.Gone(cli.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true})); err != nil {
			t.Errorf("remove container: %v", err)
		}
	}()
	for _, n := range more {
		if err := cli.NetworkConnect(ctx, n, resp.ID, &network.EndpointSettings{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	wc, ec := cli.ContainerWait(ctx, resp.ID, container.WaitConditionNotRunning)
	select {
	case <-wc:
	case err := <-ec:
		t.Fatal(err)
	}
	rc, err := cli.ContainerLogs(ctx, resp.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	var stdout, stderr bytes.Buffer
	_, _ = stdcopy.StdCopy(&stdout, &stderr, rc)
	var r probe.Result
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &r); err != nil {
		t.Fatalf("probe %s output %q, stderr %q: %v", check, stdout.String(), stderr.String(), err)
	}
	return r
}

// memberOpts shape a member container; the zero value is an unnamed,
// test-labelled container with Docker's defaults.
type memberOpts struct {
	name    string
	labels  map[string]string
	sysctls map[string]string
}

// startMember runs an idle container on net, removed at cleanup, and
// returns its address there.
func startMember(t *testing.T, cli client.APIClient, image, net string, o memberOpts) string {
	t.Helper()
	ctx := context.Background()
	if o.labels == nil {
		o.labels = engine.Labels("test", map[string]string{"test": t.Name()})
	}
	resp, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Entrypoint: []string{"/bin/sleep"}, Cmd: []string{"300"},
		Labels: o.labels},
		&container.HostConfig{NetworkMode: container.NetworkMode(net), Sysctls: o.sysctls}, nil, nil, o.name)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove container", func() error {
		return testutil.Gone(cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true}))
	})
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err := cli.ContainerInspect(ctx, resp.ID)
	if err != nil {
		t.Fatal(err)
	}
	ep := info.NetworkSettings.Networks[net]
	if ep == nil || ep.IPAddress == "" {
		t.Fatalf("member has no address on %s", net)
	}
	return ep.IPAddress
}

// removeMember removes a member before the test's end, so later steps
// (drift, destroy) see the topology without it.
func removeMember(t *testing.T, cli client.APIClient, name string) {
	t.Helper()
	if err := cli.ContainerRemove(context.Background(), name, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
}

// execProbe runs agent-runner probe inside a running container.
func execProbe(t *testing.T, cli client.APIClient, ctr string, checks ...string) []probe.Result {
	t.Helper()
	ctx := context.Background()
	ex, err := cli.ContainerExecCreate(ctx, ctr, container.ExecOptions{
		Cmd: append([]string{"/usr/local/bin/agent-runner", "probe", "--timeout", "2s"}, checks...), AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	hr, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Close()
	var stdout, stderr bytes.Buffer
	_, _ = stdcopy.StdCopy(&stdout, &stderr, hr.Reader)
	var out []probe.Result
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var r probe.Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("exec probe output %q (%s): %v", stdout.String(), stderr.String(), err)
		}
		out = append(out, r)
	}
	if len(out) != len(checks) {
		t.Fatalf("exec probe: %d results for %d checks", len(out), len(checks))
	}
	return out
}

// TestNetworkWithEndpoints: a network that must go while a foreign
// container is attached is a clear error naming it, not a hang.
func TestNetworkWithEndpoints(t *testing.T) {
	testutil.RequireDocker(t)
	ctx := context.Background()
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	in := freeInput(t, cli, "meepa-test-tgep")
	in.Proxy = topospec.ProxyInput{Image: image, Allow: []string{"example.com"}}
	s, _ := Build(in)
	svc := NewService(cli, nil)
	testutil.Cleanup(t, "tear down topology", func() error { return svc.Teardown(context.WithoutCancel(ctx), s.Name) })
	if _, err := svc.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	member := "meepa-test-tgep-member-" + s.Name[len(s.Name)-4:]
	startMember(t, cli, image, s.Network(topospec.LLMNet).Name, memberOpts{name: member})
	start := time.Now()
	err := svc.Teardown(ctx, s.Name)
	if err == nil || !strings.Contains(err.Error(), member) || !strings.Contains(err.Error(), "detach or destroy") {
		t.Fatalf("destroy with a member attached = %v, want an error naming %s", err, member)
	}
	t.Logf("destroy refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if o, _ := Observe(ctx, cli, s); o.Proxy == nil || len(o.Networks) != 3 {
		t.Errorf("a refused destroy removed something: proxy %v, %d networks", o.Proxy, len(o.Networks))
	}

	// Changing the subnet of a network with a member: refused before
	// anything is removed.
	in.Docker.Subnets[topospec.LLMNet] = strings.Replace(in.Docker.Subnets[topospec.LLMNet], ".0/24", ".0/25", 1)
	s2, ps := Build(in)
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	if _, err := svc.Apply(ctx, s2); err == nil || !strings.Contains(err.Error(), member) {
		t.Fatalf("ensure with a changed subnet and a member attached = %v", err)
	}
}

// TestConflicts: a subnet overlapping a host route or a Docker network of
// another topology is found before anything is created.
func TestConflicts(t *testing.T) {
	testutil.RequireDocker(t)
	ctx := context.Background()
	cli := testutil.Docker(t)
	out := testutil.StartOutside(t) // a veth route 198.18.x.0/24, nothing listening
	in := freeInput(t, cli, "meepa-test-tgcf")
	in.Proxy = topospec.ProxyInput{Image: "x"}
	in.Docker.Subnets[topospec.FetchNet] = out.Prefix
	s, _ := Build(in)
	ps, err := Conflicts(ctx, cli, s, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Field != "fetchnet_subnet" || ps[0].Summary != "Subnet Overlaps A Host Route" {
		t.Fatalf("host route overlap: %v", ps)
	}

	// Another topology's network.
	other := freeInput(t, cli, "meepa-test-tgcf")
	other.Proxy = topospec.ProxyInput{Image: "x"}
	os, _ := Build(other)
	n := os.Network(topospec.LLMNet)
	if err := NewService(cli, nil).createNetwork(ctx, os, n); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove network "+n.Name, func() error { return testutil.Gone(cli.NetworkRemove(context.WithoutCancel(ctx), n.Name)) })
	in = freeInput(t, cli, "meepa-test-tgcf")
	in.Proxy = topospec.ProxyInput{Image: "x"}
	in.Docker.Subnets[topospec.EgressNet] = n.Subnet.String()
	s, _ = Build(in)
	if ps, err = Conflicts(ctx, cli, s, true); err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Field != "egressnet_subnet" || !strings.Contains(ps[0].Err.Error(), n.Name) {
		t.Fatalf("docker network overlap: %v", ps)
	}
	// Its own networks are no conflict for a topology.
	if ps, _ := Conflicts(ctx, cli, os, true); len(ps) != 0 {
		t.Errorf("own network reported as conflict: %v", ps)
	}
}

func TestSweepStale(t *testing.T) {
	testutil.RequireDocker(t)
	ctx := context.Background()
	cli := testutil.Docker(t)
	in := freeInput(t, cli, "meepa-test-tgsw")
	s, _ := Build(in)
	svc := NewService(cli, nil)
	if err := svc.createNetwork(ctx, s, s.Network(topospec.LLMNet)); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove llmnet", func() error {
		return testutil.Gone(cli.NetworkRemove(context.WithoutCancel(ctx), s.Network(topospec.LLMNet).Name))
	})
	if swept, err := testutil.SweepTopologies(ctx, cli, LabelTopology, s.Name, time.Hour, svc.Teardown); err != nil || len(swept) != 0 {
		t.Fatalf("a fresh topology was swept: %v %v", swept, err)
	}
	if swept, err := testutil.SweepTopologies(ctx, cli, LabelTopology, s.Name, 0, svc.Teardown); err != nil || len(swept) != 1 {
		t.Fatalf("sweep = %v, %v", swept, err)
	}
	if o, _ := Observe(ctx, cli, s); len(o.Networks) != 0 {
		t.Errorf("network survived the sweep")
	}
}
