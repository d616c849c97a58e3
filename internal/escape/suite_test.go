package escape

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/bridge"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

const pagePath = "../../templates/guides/escape-results.md.tmpl"

func token() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// world is what every probe run is pointed at: the victim process, the
// planted credential, the network stand-ins.
type world struct {
	probe          string // the probe binary on the host, world-executable
	image          string // busybox plus the probe at /escape-probe
	credDir, cred  string
	secret, marker string
	meta, egress   string
	dns            string
	roles          map[string]topospec.Role
}

func (w world) args() []string {
	return []string{"run", "-secret", w.secret, "-marker", w.marker, "-cred", w.cred, "-meta", w.meta, "-egress", w.egress, "-dns", w.dns}
}

// TestEscapeSuite runs every scenario in every mode and runtime with its
// control, and compares the results with the committed page.
func TestEscapeSuite(t *testing.T) {
	testutil.RequireDocker(t)
	if os.Geteuid() != 0 {
		t.Skip("the suite runs a host-mode agent under its own uid and a root control: needs root")
	}
	ctx := context.Background()
	cli := testutil.Docker(t)
	w := setup(t, cli)

	var rows []Row
	runtimes := []string{"runc", "runsc"}
	info, err := cli.Info(ctx)
	testutil.Must(t, err)
	complete := true
	for _, rt := range runtimes {
		if _, ok := info.Runtimes[rt]; !ok {
			t.Logf("the Docker daemon has no %q runtime: its rows are not checked (scripts/runsc.sh docker registers runsc)", rt)
			complete = false
			continue
		}
		control := ParseProbe(controlContainer(t, cli, w, rt))
		none := ParseProbe(inSandbox(t, cli, w, sandbox.Spec{Runtime: rt, Network: "none"}, "none"))
		br := ParseProbe(inSandbox(t, cli, w, sandbox.Spec{Runtime: rt, Network: "bridge"}, "bridge"))
		for _, s := range Scenarios {
			rows = append(rows, Judge(s, ModeNone, rt, none[s.ID], control[s.ID]))
		}
		for _, s := range Scenarios {
			if !s.NoBridge {
				rows = append(rows, Judge(s, ModeBridge, rt, br[s.ID], control[s.ID]))
			}
		}
		for _, role := range []string{topospec.RoleCore, topospec.RoleFetch, topospec.RoleToolExec} {
			r := w.roles[role]
			spec := sandbox.Spec{Runtime: rt, Networks: r.Networks, DNS: agentspec.AddrsOf(r.DNS), Env: r.Env}
			if r.SandboxNetwork != "" {
				spec.Networks, spec.DNS, spec.Network = nil, nil, r.SandboxNetwork
			}
			got := ParseProbe(inSandbox(t, cli, w, spec, role))
			for _, s := range Scenarios {
				rows = append(rows, Judge(s, ModeThreeGate+" "+role, rt, got[s.ID], control[s.ID]))
			}
		}
	}
	hostControl := ParseProbe(onHost(t, w))
	hostSandbox := ParseProbe(inHostMode(t, w))
	for _, s := range Scenarios {
		rows = append(rows, Judge(s, ModeHost, "none (host)", hostSandbox[s.ID], hostControl[s.ID]))
	}
	sortRows(rows)
	for i := range rows {
		// The temporary paths change with every run.
		rows[i].Detail = strings.ReplaceAll(rows[i].Detail, w.cred, "<planted credential>")
	}
	t.Logf("results:\n%s\n%s", Totals(rows), Table(rows))

	if os.Getenv("MEEPA_ESCAPE_WRITE") != "" {
		if !complete {
			t.Fatal("MEEPA_ESCAPE_WRITE: not writing a page without every runtime's rows")
		}
		page := Page(versions(t, cli, info.Runtimes["runsc"].Path), rows)
		testutil.Must(t, os.WriteFile(pagePath, []byte(page), 0o644))
		testutil.Must(t, os.WriteFile("../../docs/guides/escape-results.md", []byte(page), 0o644))
		t.Logf("wrote %s and docs/guides/escape-results.md", pagePath)
		return
	}
	raw, err := os.ReadFile(pagePath)
	testutil.Must(t, err)
	committed := map[string]bool{}
	for _, k := range ParseTable(string(raw)) {
		committed[k] = true
	}
	for _, r := range rows {
		if !committed[r.Key()] {
			t.Errorf("result differs from the committed page: %s (%s)", r.Key(), r.Detail)
		}
	}
	if want := len(ParseTable(string(raw))); complete && want != len(rows) {
		t.Errorf("%d rows, the committed page has %d", len(rows), want)
	}
}

// sortRows orders rows by mode, runtime, then scenario order (stable).
func sortRows(rows []Row) {
	order := map[string]int{ModeNone: 0, ModeBridge: 1, ModeThreeGate + " " + topospec.RoleCore: 2,
		ModeThreeGate + " " + topospec.RoleFetch: 3, ModeThreeGate + " " + topospec.RoleToolExec: 4, ModeHost: 5}
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0; j-- {
			a, b := rows[j-1], rows[j]
			if order[a.Mode] > order[b.Mode] || order[a.Mode] == order[b.Mode] && a.Runtime > b.Runtime {
				rows[j-1], rows[j] = b, a
			}
		}
	}
}

func setup(t *testing.T, cli *client.Client) world {
	t.Helper()
	ctx := context.Background()
	w := world{secret: "meepa-escape-secret-" + token(), marker: "meepa-escape-victim-" + token()}

	dir, err := os.MkdirTemp("", "meepa-escape-")
	testutil.Must(t, err)
	testutil.Must(t, os.Chmod(dir, 0o755))
	testutil.Cleanup(t, "remove the probe's directory", func() error { return os.RemoveAll(dir) })
	w.probe = filepath.Join(dir, "escape-probe")
	build := exec.Command("go", "build", "-o", w.probe, "./probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, out)
	}
	testutil.Must(t, os.Chmod(w.probe, 0o755))
	bin, err := os.ReadFile(w.probe)
	testutil.Must(t, err)

	w.image = "meepa-test/escape-probe:" + token()
	testutil.BuildImage(t, cli, w.image, "FROM "+testutil.EnsureBusybox(t, cli)+"\nCOPY escape-probe /escape-probe\n", map[string][]byte{"escape-probe": bin})
	testutil.Cleanup(t, "remove "+w.image, func() error {
		_, err := cli.ImageRemove(context.Background(), w.image, image.RemoveOptions{Force: true})
		return testutil.Gone(err)
	})

	// The planted credential: readable by anyone as far as file modes go,
	// in a directory anyone may traverse, outside every workspace.
	w.credDir = testutil.SharedTempDir(t)
	w.cred = filepath.Join(w.credDir, "cloud-token")
	testutil.Must(t, os.WriteFile(w.cred, []byte("planted-"+token()), 0o644))

	// The victim: a process outside every sandbox with a secret in its
	// environment.
	victim := exec.Command(w.probe, "victim", w.marker)
	victim.Env = []string{"MEEPA_ESCAPE_SECRET=" + w.secret}
	testutil.Must(t, victim.Start())
	testutil.Cleanup(t, "stop the victim", func() error {
		_ = victim.Process.Kill()
		_ = victim.Wait()
		return nil
	})

	w.meta = testutil.StartLinkLocal(t, 8080)
	outside := testutil.StartOutside(t, 8443)
	w.egress = outside.Addr(8443)
	outside.StartDNS(t, map[string]string{"exfil.test.": "198.18.0.7"})
	w.dns = outside.Addr(53)

	// The managed bridge as the runner makes it (network and firewall),
	// removed afterwards only when this test made it: other tests share it.
	_, ierr := cli.NetworkInspect(ctx, sandbox.ManagedBridge, network.InspectOptions{})
	testutil.Must(t, bridge.Ensure(ctx, cli, testutil.EnsureRunnerImage(t, cli), nil, nil))
	if cerrdefs.IsNotFound(ierr) {
		testutil.Cleanup(t, "remove the managed bridge", func() error { return removeBridge(cli) })
	}
	w.roles = threeGate(t, cli, outside)
	return w
}

// threeGate applies a ThreeGate topology with its host firewall, its proxy
// allowing nothing the probes ask for, and returns its roles.
func threeGate(t *testing.T, cli *client.Client, outside *testutil.Outside) map[string]topospec.Role {
	t.Helper()
	ctx := context.Background()
	img := testutil.EnsureRunnerImage(t, cli)
	for try := 0; try < 30; try++ {
		a := 3 * mrand.IntN(80)
		in := topospec.Input{
			Name: fmt.Sprintf("meepa-test-tg-esc-%04x", mrand.IntN(0xffff)),
			Docker: topospec.DockerInput{Subnets: map[string]string{topospec.LLMNet: fmt.Sprintf("10.213.%d.0/24", a),
				topospec.FetchNet: fmt.Sprintf("10.213.%d.0/24", a+1), topospec.EgressNet: fmt.Sprintf("10.213.%d.0/24", a+2)},
				Firewall: &topospec.Firewall{Enabled: true}},
			Proxy: topospec.ProxyInput{Image: img, Allow: []string{"localhost:443"}, DNS: []string{outside.IP}},
		}
		s, ps := topology.Build(in)
		if len(ps) > 0 {
			t.Fatal(ps)
		}
		if conflicts, err := topology.Conflicts(ctx, cli, s, true); err != nil {
			t.Fatal(err)
		} else if len(conflicts) > 0 {
			continue
		}
		svc := topology.NewService(cli, nil)
		testutil.Cleanup(t, "tear the topology down", func() error { return svc.Teardown(context.Background(), s.Name) })
		if _, err := svc.Apply(ctx, s); err != nil {
			t.Fatal(err)
		}
		return topology.Roles(s)
	}
	t.Fatal("no free subnets in 10.213.0.0/16")
	return nil
}

func removeBridge(cli client.APIClient) error {
	ctx := context.Background()
	err := guard.Remove(ctx, cli, sandbox.ManagedBridge)
	in, ierr := cli.NetworkInspect(ctx, sandbox.ManagedBridge, network.InspectOptions{})
	if ierr != nil {
		return errors.Join(err, testutil.Gone(ierr))
	}
	p, perr := bridge.Params(in, nil)
	h, herr := firewall.Open(ctx, nil)
	if perr == nil && herr == nil {
		err = errors.Join(err, h.Remove(ctx, firewall.BuildBridge(p)))
	}
	return errors.Join(err, perr, herr, testutil.Gone(cli.NetworkRemove(ctx, in.ID)))
}

// inSandbox runs the probe as one message through the product's Docker
// backend: HardenedSpec's container, the agent's uid, the given network.
func inSandbox(t *testing.T, cli *client.Client, w world, spec sandbox.Spec, what string) string {
	t.Helper()
	ctx := context.Background()
	spec.AgentID, spec.Workspace, spec.Image = "tf-acc-escape-"+token(), t.TempDir(), w.image
	spec.Command = append([]string{"/escape-probe"}, w.args()...)
	o := sandbox.DockerOptions{Spec: spec, ChownWorkspace: true}
	nets := spec.Networks
	if len(nets) == 0 && spec.Network == "bridge" {
		nets = []string{sandbox.ManagedBridge}
	}
	if len(nets) > 0 {
		// As the runner does: start only while the guard vouches.
		o.Enforcement = func(ctx context.Context) error { return guard.Enforced(ctx, cli, nets) }
	}
	d, err := sandbox.NewDocker(ctx, cli, o)
	testutil.Must(t, err)
	testutil.Cleanup(t, "close the backend", func() error {
		_, err := sandbox.RemoveOrphans(context.Background(), cli, spec.AgentID)
		return errors.Join(d.Close(context.Background()), err)
	})
	out, err := d.Run(ctx, sandbox.Job{MessageID: "m-escape", Stdin: []byte("{}"), Timeout: 90 * time.Second})
	testutil.Must(t, err)
	t.Logf("sandbox %s/%s: exit %d\n%s%s", spec.Runtime, what, out.ExitCode, out.Stdout, out.StderrTail)
	return string(out.Stdout)
}

// controlCaps is every capability but CAP_SYS_RESOURCE: --privileged is
// the benchmarks' misconfiguration, but a daemon without CAP_SYS_RESOURCE
// in its own bounding set (this machine's) cannot start one, so the
// control spells privileged out: these, no seccomp or AppArmor, /proc
// unmasked, every device allowed, the host's /sys mounted read-write.
// (Docker 20.10 knows no CAP_BPF or CAP_PERFMON; CAP_SYS_ADMIN covers both.)
var controlCaps = []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
	"LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE",
	"SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_TIME", "SYS_TTY_CONFIG",
	"MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM",
	"BLOCK_SUSPEND", "AUDIT_READ"}

// controlContainer runs the probe in a container that is wrong on purpose.
func controlContainer(t *testing.T, cli *client.Client, w world, runtime string) string {
	t.Helper()
	ctx := context.Background()
	cfg := &container.Config{Image: w.image, Entrypoint: append([]string{"/escape-probe"}, w.args()...), User: "0:0"}
	hc := &container.HostConfig{
		CapAdd: controlCaps, PidMode: "host", Runtime: runtime, NetworkMode: "bridge",
		SecurityOpt: []string{"seccomp=unconfined", "apparmor=unconfined"},
		MaskedPaths: []string{}, ReadonlyPaths: []string{},
		Resources: container.Resources{DeviceCgroupRules: []string{"b *:* rwm", "c *:* rwm"}},
		Binds:     []string{"/var/run/docker.sock:/var/run/docker.sock", w.credDir + ":/host" + w.credDir + ":ro", "/sys:/sys:rw"},
	}
	c, err := cli.ContainerCreate(ctx, cfg, hc, nil, nil, "tf-acc-escape-control-"+token())
	testutil.Must(t, err)
	testutil.Cleanup(t, "remove the control container", func() error {
		return testutil.Gone(cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}))
	})
	testutil.Must(t, cli.ContainerStart(ctx, c.ID, container.StartOptions{}))
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	waitC, errC := cli.ContainerWait(wctx, c.ID, container.WaitConditionNotRunning)
	select {
	case <-waitC:
	case err := <-errC:
		t.Fatal(err)
	}
	logs, err := cli.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	testutil.Must(t, err)
	defer func() { _ = logs.Close() }() // read-only stream
	var stdout, stderr bytes.Buffer
	_, err = stdcopy.StdCopy(&stdout, &stderr, logs)
	testutil.Must(t, err)
	t.Logf("control %s:\n%s%s", runtime, stdout.String(), stderr.String())
	return stdout.String()
}

// onHost is host mode's control: the probe as root without the sandbox, in
// a mount namespace of its own (its mounts stay there).
func onHost(t *testing.T, w world) string {
	t.Helper()
	cmd := exec.Command(w.probe, w.args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("host control: %v\n%s", err, out)
	}
	t.Logf("host control:\n%s", out)
	return string(out)
}

// inHostMode runs the probe as one message of a host-mode agent: the
// runner's Landlock and seccomp sandbox, the agent's uid, no network; the
// probe binary is all it may read beyond the defaults.
func inHostMode(t *testing.T, w world) string {
	t.Helper()
	if landlock.DetectABI() < landlock.MinFSABI {
		t.Fatalf("host mode needs Landlock (ABI %d here)", landlock.DetectABI())
	}
	id := "tf-acc-escape-" + token()
	ws := filepath.Join(testutil.SharedTempDir(t), "workspace")
	testutil.Must(t, os.MkdirAll(ws, 0o755))
	h, err := sandbox.NewHost(sandbox.HostOptions{
		AgentID: id, Workspace: ws, RunnerBinary: testutil.RunnerBinary(t),
		FileAccess: landlock.FileAccess{AllowRead: []string{w.probe}},
	})
	testutil.Must(t, err)
	req, err := json.Marshal(agent.Request{
		AgentID: id,
		Message: agent.Message{ID: "m-escape", Text: agent.OfflineShellPrefix + w.probe + " " + strings.Join(w.args(), " ")},
		LLM:     agentspec.LLMConfig{Provider: agentspec.ProviderOffline},
	})
	testutil.Must(t, err)
	out, err := h.Run(context.Background(), sandbox.Job{MessageID: "m-escape", Stdin: req, Timeout: 90 * time.Second})
	testutil.Must(t, err)
	var r agent.Reply
	if err := json.Unmarshal(out.Stdout, &r); err != nil || r.ErrorKind != "" {
		t.Fatalf("host mode: reply %q (%v): %s: %s; stderr %s", out.Stdout, err, r.ErrorKind, r.Error, out.StderrTail)
	}
	t.Logf("host mode:\n%s", r.Reply)
	return r.Reply
}

func versions(t *testing.T, cli *client.Client, runscPath string) Versions {
	t.Helper()
	v := Versions{Date: time.Now().UTC().Format("2006-01-02")}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		v.Kernel = utsString(u.Release[:])
	}
	if sv, err := cli.ServerVersion(context.Background()); err == nil {
		v.Docker = sv.Version
	}
	first := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).Output()
		if err != nil {
			return fmt.Sprintf("unknown (%v)", err)
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return line
	}
	v.Runc = first("runc", "--version")
	v.Runsc = first(runscPath, "--version")
	return v
}

func utsString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}
