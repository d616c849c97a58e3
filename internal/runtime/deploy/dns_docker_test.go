package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/probe"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner/backends"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestThreegateMembersDNSStaysOnLLMNet asks, from each role's runner
// container and per-message container as the product specifies them
// (ForConfig/Spec and backends.DockerOptions/HardenedSpec with the role
// that ResolveRole gives), for an outside name and for the names members
// need. The host firewall is off: what holds must hold by construction.
// Two iptables counters stand for the outside: one where a query that the
// engine's resolver forwards from a member's namespace enters the host,
// one where a query it forwards from the host's own namespace leaves; both
// match the query's unique label. Before the members got the topology's
// DNS sink, Docker 20.10 forwarded the name to the host's resolvers from
// the member's namespace (internal networks keep a default route there)
// and the first counter saw every such query.
func TestThreegateMembersDNSStaysOnLLMNet(t *testing.T) {
	testutil.RequireDocker(t)
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("needs iptables")
	}
	ctx := context.Background()
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	s := freeTopology(t, cli, image)
	svc := topology.NewService(cli, nil)
	testutil.Cleanup(t, "teardown topology", func() error { return svc.Teardown(context.WithoutCancel(ctx), s.Name) })
	if _, err := svc.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	llm := s.Network(topospec.LLMNet).Name
	gateway := s.Name + "-llm-gateway"
	startIdle(t, cli, testutil.EnsureBusybox(t, cli), gateway, llm)

	label := fmt.Sprintf("leak%08x", rand.Uint32())
	outside := label + ".example.com"
	count := countDNS(t, label)

	state := testutil.SharedTempDir(t)
	roles := topology.Roles(s)
	for _, tc := range []struct{ topoRole, role string }{
		{topospec.RoleCore, agentspec.RoleCore}, {topospec.RoleFetch, agentspec.RoleFetch}, {topospec.RoleToolExec, agentspec.RoleToolExec},
	} {
		r := roles[tc.topoRole]
		if len(r.DNS) != 1 || r.DNS[0] != topology.DNSSink(s) {
			t.Fatalf("%s: role DNS %v, want the sink %s", tc.topoRole, r.DNS, topology.DNSSink(s))
		}
		id := "dns-" + strings.ReplaceAll(tc.role, "_", "-")
		ws := filepath.Join(state, id, "ws")
		relay := filepath.Join(state, id, "relay")
		for _, d := range []string{ws, relay} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cfg := agentspec.Config{AgentID: id, Workspace: ws, Role: tc.role, RelayDir: relay,
			LLM:       agentspec.LLMConfig{Provider: "openai", Model: "m", BaseURL: "http://" + gateway + ":4000/v1"},
			Container: agentspec.ContainerMode{Enabled: true, Image: image, Networks: r.Networks, DNS: agentspec.AddrsOf(r.DNS)}}

		// The runner container.
		layout := LayoutFor(state, id)
		for _, d := range []string{layout.Dir, layout.SocketDir, layout.JournalDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		d, err := ForConfig(cfg, Placement{Image: image, Layout: layout, Listener: Listener{Unix: layout.Socket}, Workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		rc, rhc, _ := Spec(d.withDefaults())
		rhc.RestartPolicy = container.RestartPolicy{}
		checks := []string{"dns=" + outside, "dns=" + gateway}
		want := []string{probe.NotResolved, probe.Resolved}
		if tc.topoRole == topospec.RoleFetch {
			checks, want = append(checks, "dns="+topospec.ProxyName(s.Name)), append(want, probe.Resolved)
		}
		res := runProbe(t, cli, rc, rhc, d.withDefaults().Networks, checks)
		expect(t, tc.topoRole+" runner", res, want...)

		// Its per-message container.
		o := backends.DockerOptions(&cfg, nil)
		mc, mhc, _, err := sandbox.HardenedSpec(o.Spec, "dns-test")
		if err != nil {
			t.Fatal(err)
		}
		if tc.topoRole == topospec.RoleToolExec {
			// No network at all, so no resolver: neither name resolves.
			res = runProbe(t, cli, mc, mhc, nil, []string{"dns=" + outside, "dns=" + gateway})
			expect(t, tc.topoRole+" message container", res, probe.NotResolved, probe.NotResolved)
			continue
		}
		res = runProbe(t, cli, mc, mhc, o.Spec.Networks, checks)
		expect(t, tc.topoRole+" message container", res, want...)
	}
	if fromMember, fromHost := count(); fromMember+fromHost != 0 {
		t.Errorf("queries for %s left the members: %d entered the host from a member's namespace, %d left the host's own namespace",
			outside, fromMember, fromHost)
	}
}

func expect(t *testing.T, who string, res []probe.Result, want ...string) {
	t.Helper()
	for i, w := range want {
		if res[i].Observed != w {
			t.Errorf("%s: %s observed %s (%s), want %s", who, res[i].Check, res[i].Observed, res[i].Detail, w)
		}
	}
}

// freeTopology builds a topology on three free /24s of 10.214.0.0/16, with
// the host firewall off.
func freeTopology(t *testing.T, cli client.APIClient, image string) topospec.Spec {
	t.Helper()
	for try := 0; try < 30; try++ {
		a := 3 * rand.IntN(80)
		s, ps := topology.Build(topospec.Input{
			Name: fmt.Sprintf("meepa-test-tg-dns-%04x", rand.IntN(0xffff)),
			Docker: topospec.DockerInput{Subnets: map[string]string{topospec.LLMNet: fmt.Sprintf("10.214.%d.0/24", a),
				topospec.FetchNet: fmt.Sprintf("10.214.%d.0/24", a+1), topospec.EgressNet: fmt.Sprintf("10.214.%d.0/24", a+2)},
				Firewall: &topospec.Firewall{}},
			Proxy: topospec.ProxyInput{Image: image},
		})
		if len(ps) > 0 {
			t.Fatal(ps)
		}
		conflicts, err := topology.Conflicts(context.Background(), cli, s, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(conflicts) == 0 {
			return s
		}
	}
	t.Fatal("no free subnets in 10.214.0.0/16")
	return topospec.Spec{}
}

func startIdle(t *testing.T, cli client.APIClient, image, name, net string) {
	t.Helper()
	ctx := context.Background()
	resp, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Entrypoint: []string{"/bin/sleep"}, Cmd: []string{"600"}},
		&container.HostConfig{NetworkMode: container.NetworkMode(net)}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove "+name, func() error {
		return testutil.Gone(cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true}))
	})
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
}

// runProbe runs agent-runner probe in a container made from the product's
// spec (only the command is the probe's), joined to nets as the product
// joins it, and returns one result per check.
func runProbe(t *testing.T, cli client.APIClient, cfg *container.Config, hc *container.HostConfig, nets []string, checks []string) []probe.Result {
	t.Helper()
	ctx := context.Background()
	cfg.Entrypoint = []string{"/usr/local/bin/agent-runner"}
	cfg.Cmd = append([]string{"probe", "--timeout", "3s"}, checks...)
	cfg.OpenStdin, cfg.StdinOnce, cfg.AttachStdin = false, false, false
	hc.LogConfig = container.LogConfig{Type: "json-file"}
	resp, err := cli.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := testutil.Gone(cli.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true})); err != nil {
			t.Errorf("remove probe: %v", err)
		}
	}()
	for _, n := range nets[min(1, len(nets)):] {
		if err := cli.NetworkConnect(ctx, n, resp.ID, &network.EndpointSettings{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	wc, ec := cli.ContainerWait(wctx, resp.ID, container.WaitConditionNotRunning)
	select {
	case <-wc:
	case err := <-ec:
		t.Fatal(err)
	}
	rc, err := cli.ContainerLogs(ctx, resp.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }() // read-only stream
	var stdout, stderr bytes.Buffer
	_, _ = stdcopy.StdCopy(&stdout, &stderr, rc)
	var out []probe.Result
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var r probe.Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("probe output %q (stderr %q): %v", stdout.String(), stderr.String(), err)
		}
		out = append(out, r)
	}
	if len(out) != len(checks) {
		t.Fatalf("%d results for %d checks: %q", len(out), len(checks), stdout.String())
	}
	return out
}

// countDNS inserts counting rules (no target, so they only count) for
// DNS packets that carry label: in mangle PREROUTING, where a query the
// engine forwards from a member's namespace enters the host, and in mangle
// OUTPUT, where one it forwards from the host's namespace leaves. The
// rules go at cleanup.
func countDNS(t *testing.T, label string) func() (fromMember, fromHost int) {
	t.Helper()
	comment := "meepa-test " + label
	var rules [][]string
	for _, chain := range []string{"PREROUTING", "OUTPUT"} {
		for _, proto := range []string{"udp", "tcp"} {
			rules = append(rules, []string{"-t", "mangle", "%s", chain, "-p", proto, "--dport", "53",
				"-m", "string", "--algo", "bm", "--string", label, "-m", "comment", "--comment", comment})
		}
	}
	ipt := func(op string, r []string) error {
		args := make([]string, len(r))
		copy(args, r)
		args[2] = op
		if out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	for _, r := range rules {
		if err := ipt("-I", r); err != nil {
			t.Fatal(err)
		}
		testutil.Cleanup(t, "remove counting rule", func() error { return ipt("-D", r) })
	}
	pkts := regexp.MustCompile(`^\s*(\d+)\s`)
	read := func(chain string) int {
		out, err := exec.Command("iptables", "-w", "-t", "mangle", "-L", chain, "-v", "-x", "-n").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -L %s: %v: %s", chain, err, out)
		}
		n := 0
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.Contains(line, comment) {
				continue
			}
			if m := pkts.FindStringSubmatch(line); m != nil {
				v, _ := strconv.Atoi(m[1])
				n += v
			}
		}
		return n
	}
	return func() (int, int) { return read("PREROUTING"), read("OUTPUT") }
}
