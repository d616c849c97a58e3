// Command meepa-bench measures the per-message container path on the local
// Docker daemon (`make bench`), all in one run on the same image, flags and
// trivial offline request:
//
//	(a) bare Engine API: create, attach, start, write the request, read the
//	    reply, wait, remove (the hardened spec, agent-runner agent-run);
//	(b) `docker run --rm -i` of the same with the same flags;
//	(c) a runner round trip over HTTP (unix socket), prestart off;
//	(d) the same with prestart on, each message sent when /healthz says the
//	    next container is ready (the pace of a chat);
//	(e) back-to-back messages to one agent, prestart on (and off, to compare);
//	and throughput with 1, 2 and 4 agents in parallel (prestart on);
//	(h) the host-mode (Landlock) runner round trip for the same message,
//	    against the container-mode one (prestart off) in the same rounds;
//	(k) d over h: what the prestarted container path costs beyond running
//	    the agent at all (host mode starts a process per message too);
//	(g) c and d with the per-message containers under gVisor (runtime
//	    runsc), as ratios to runc's c and d in the same rounds, when dockerd
//	    has runsc (scripts/runsc.sh docker);
//	(i) a TOOL-EXEC message with one shell call, prestart on, and
//	(j) a CORE message that asks TOOL-EXEC once, as ratios to (a).
//
// a, b, c and d run interleaved, round by round, so that load from other
// work on the machine falls on all of them alike. It prints medians and, as
// its last line:
//
//	bench: b/a=<x> c/a=<x> d/a=<x> k=<d/h> e=<msgs/s> thr2/thr1=<x> thr4/thr1=<x>
//
// With MEEPA_KUBECONFIG set (export MEEPA_KUBECONFIG=$(scripts/k8s-up.sh))
// a Kubernetes section runs first (kube.go); -kube-only stops after it.
//
// Images are built locally from /bin/busybox (Debian's busybox-static) and a
// fresh agent-runner; nothing is pulled.
package main

import (
	"errors"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/bogpad/terraform-provider-meepa/internal/testimage"

	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

const (
	baseImage = "meepa-bench/busybox:latest"
	benchText = "hello"
)

// runID keeps concurrent bench runs (several worktrees share one daemon)
// apart: each runner removes its agent's containers that it did not make,
// so two runs with the same agent ids would break each other's messages.
var (
	runID       = randomHex(3)
	runnerImage = "meepa-bench/runner:" + runID
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func agentName(role string) string { return "meepa-bench-" + runID + "-" + role }

func main() {
	rounds := flag.Int("rounds", 15, "rounds of a, b, c and d (after one warm-up round)")
	burst := flag.Int("burst", 10, "messages per back-to-back run (e)")
	perAgent := flag.Int("per-agent", 8, "messages per agent in the throughput runs")
	reps := flag.Int("reps", 3, "repetitions of (e) and of the throughput runs")
	kubeOnly := flag.Bool("kube-only", false, "run only the Kubernetes section (needs MEEPA_KUBECONFIG)")
	flag.Parse()
	if err := run(*rounds, *burst, *perAgent, *reps, *kubeOnly); err != nil {
		fmt.Fprintln(os.Stderr, "meepa-bench:", err)
		os.Exit(1)
	}
}

func run(rounds, burst, perAgent, reps int, kubeOnly bool) error {
	ctx := context.Background()
	cli, err := engine.Connect(ctx, engine.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	if err := buildImages(ctx, cli); err != nil {
		return err
	}
	// Only this run's tag goes; the layers stay in the build cache.
	defer func() {
		if _, err := cli.ImageRemove(context.WithoutCancel(ctx), runnerImage, image.RemoveOptions{}); err != nil {
			fmt.Fprintf(os.Stderr, "meepa-bench: remove %s: %v\n", runnerImage, err)
		}
	}()
	tmp, err := os.MkdirTemp("", "meepa-bench-")
	if err != nil {
		return err
	}
	defer removeAll(tmp)
	// Searchable by others: a root runner runs a host-mode agent under the
	// agent's own uid, which must pass through to its workspace.
	if err := os.Chmod(tmp, 0o711); err != nil {
		return err
	}
	if kc := os.Getenv("MEEPA_KUBECONFIG"); kc != "" {
		if err := benchKube(ctx, cli, kc, tmp, rounds); err != nil {
			return fmt.Errorf("kubernetes: %w", err)
		}
	} else if kubeOnly {
		return errors.New("-kube-only: set MEEPA_KUBECONFIG (scripts/k8s-up.sh prints it)")
	}
	if kubeOnly {
		return nil
	}

	// A workspace of agent id: its containers run as the agent's own user.
	newWorkspace := func(id string) (string, error) {
		ws := filepath.Join(tmp, id)
		if err := os.Mkdir(ws, 0o755); err != nil {
			return "", err
		}
		u := agentspec.AgentUser(id)
		return ws, os.Chown(ws, u.UID, u.GID)
	}
	wsA, err := newWorkspace(agentName("bare"))
	if err != nil {
		return err
	}
	spec := sandbox.Spec{AgentID: agentName("bare"), Workspace: wsA, Image: runnerImage}
	request, _ := json.Marshal(agent.Request{AgentID: spec.AgentID, Message: agent.Message{ID: "bench", Text: benchText}, LLM: agentspec.LLMConfig{Provider: "offline"}})
	dockerArgs, err := dockerRunArgs(spec)
	if err != nil {
		return err
	}

	var runners []*benchRunner
	defer func() {
		for _, r := range runners {
			r.close()
		}
	}()
	newRunner := func(name string, prestart bool, runtime string) (*benchRunner, error) {
		ws, err := newWorkspace(name)
		if err != nil {
			return nil, err
		}
		r, err := startRunner(ctx, tmp, name, ws, prestart, runtime)
		if err == nil {
			runners = append(runners, r)
		}
		return r, err
	}
	cold, err := newRunner(agentName("cold"), false, "")
	if err != nil {
		return err
	}
	warm, err := newRunner(agentName("warm"), true, "")
	if err != nil {
		return err
	}

	var a, b, c, d []time.Duration
	for i := 0; i <= rounds; i++ {
		ta, err := timed(func() error { return bareCycle(ctx, cli, spec, request) })
		if err != nil {
			return fmt.Errorf("(a): %w", err)
		}
		tb, err := timed(func() error { return dockerRun(dockerArgs, request) })
		if err != nil {
			return fmt.Errorf("(b): %w", err)
		}
		tc, err := timed(func() error { return cold.send() })
		if err != nil {
			return fmt.Errorf("(c): %w", err)
		}
		if err := cold.waitIdle(); err != nil {
			return err
		}
		if err := warm.waitReady(); err != nil {
			return err
		}
		td, err := timed(func() error { return warm.send() })
		if err != nil {
			return fmt.Errorf("(d): %w", err)
		}
		// The replacement starts now; let it finish before the next round's
		// (a) so the rounds do not overlap.
		if err := warm.waitReady(); err != nil {
			return err
		}
		// Used containers are removed just after their reply; let that
		// settle too.
		time.Sleep(150 * time.Millisecond)
		if i == 0 {
			continue // warm-up: image cache, page cache, first connections
		}
		a, b, c, d = append(a, ta), append(b, tb), append(c, tc), append(d, td)
	}
	fmt.Printf("(a) engine API create/attach/start/wait/remove  median %7.1f ms  (n=%d)\n", ms(median(a)), len(a))
	fmt.Printf("(b) docker run --rm -i                          median %7.1f ms\n", ms(median(b)))
	fmt.Printf("(c) runner HTTP round trip, prestart off        median %7.1f ms\n", ms(median(c)))
	fmt.Printf("(d) runner HTTP round trip, prestart on, idle   median %7.1f ms\n", ms(median(d)))
	// (h) host mode (Landlock, issue 6): cmd/meepa-bench/hostmode.go.
	hostRT, ctrRT, err := benchHostMode(ctx, tmp, rounds, cold.send, cold.waitIdle)
	if err != nil {
		return fmt.Errorf("(h): %w", err)
	}
	fmt.Printf("(h) runner HTTP round trip, host mode (Landlock) median %7.1f ms (container mode, prestart off, same rounds: %.1f ms)\n", ms(hostRT), ms(ctrRT))
	fmt.Printf("bench-host: host/container=%.3f host/c=%.3f host/d=%.3f\n",
		float64(hostRT)/float64(ctrRT), float64(hostRT)/float64(median(c)), float64(hostRT)/float64(median(d)))
	k := float64(median(d)) / float64(hostRT)
	fmt.Printf("(k) prestarted round trip over host mode's, d/h                 %6.2f\n", k)

	// (g) c and d under gVisor, against runc in the same rounds (runsc.go).
	if err := benchRunsc(ctx, cli, rounds, cold, warm, newRunner); err != nil {
		return fmt.Errorf("(g): %w", err)
	}

	// (i) and (j): the ThreeGate execution layer (gates.go).
	gi, gj, err := benchGates(ctx, tmp, rounds)
	if err != nil {
		return err
	}
	fmt.Printf("(i) TOOL-EXEC message, one shell call, prestart on median %7.1f ms\n", ms(gi))
	fmt.Printf("(j) CORE message asking TOOL-EXEC once, prestart on median %7.1f ms\n", ms(gj))
	fmt.Printf("bench-gates: i/a=%.3f j/a=%.3f\n", float64(gi)/float64(median(a)), float64(gj)/float64(median(a)))

	// (e) and the throughput runs repeat, interleaved, and report medians:
	// other load on a small machine drifts over seconds, and interleaving
	// spreads it over the variants alike.
	var eOn, eOff []float64
	for range reps {
		if err := warm.waitReady(); err != nil {
			return err
		}
		on, err := backToBack([]*benchRunner{warm}, burst)
		if err != nil {
			return fmt.Errorf("(e): %w", err)
		}
		off, err := backToBack([]*benchRunner{cold}, burst)
		if err != nil {
			return fmt.Errorf("(e, prestart off): %w", err)
		}
		eOn, eOff = append(eOn, on), append(eOff, off)
	}
	fmt.Printf("(e) back-to-back to one agent, prestart on      median %6.2f msgs/s (prestart off: %.2f msgs/s; %d runs of %d)\n",
		medianF(eOn), medianF(eOff), reps, burst)

	thr := map[int][]float64{}
	pool := []*benchRunner{warm}
	for len(pool) < 4 {
		r, err := newRunner(agentName(fmt.Sprintf("thr%d", len(pool))), true, "")
		if err != nil {
			return err
		}
		pool = append(pool, r)
	}
	for range reps {
		for _, n := range []int{1, 2, 4} {
			for _, r := range pool[:n] {
				if err := r.waitReady(); err != nil {
					return err
				}
			}
			v, err := backToBack(pool[:n], perAgent)
			if err != nil {
				return fmt.Errorf("throughput with %d agents: %w", n, err)
			}
			thr[n] = append(thr[n], v)
		}
	}
	for _, n := range []int{1, 2, 4} {
		fmt.Printf("    throughput, %d agent(s) in parallel          median %6.2f msgs/s (%d runs of %d msgs)\n", n, medianF(thr[n]), reps, n*perAgent)
	}
	fmt.Printf("bench: b/a=%.2f c/a=%.2f d/a=%.2f k=%.2f e=%.2f thr2/thr1=%.2f thr4/thr1=%.2f\n",
		ratio(b, a), ratio(c, a), ratio(d, a), k, medianF(eOn), medianF(thr[2])/medianF(thr[1]), medianF(thr[4])/medianF(thr[1]))
	return nil
}

func timed(f func() error) (time.Duration, error) {
	t0 := time.Now()
	err := f()
	return time.Since(t0), err
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianF(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ratio(x, y []time.Duration) float64 { return float64(median(x)) / float64(median(y)) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// bareCycle is (a): the least the Engine API needs to run one request.
func bareCycle(ctx context.Context, cli *client.Client, spec sandbox.Spec, request []byte) error {
	cfg, hc, nc, err := sandbox.HardenedSpec(spec, "bench")
	if err != nil {
		return err
	}
	c, err := cli.ContainerCreate(ctx, cfg, hc, nc, nil, "")
	if err != nil {
		return err
	}
	defer func() {
		// The sandbox spec removes its container on exit: gone is done.
		if err := cli.ContainerRemove(context.WithoutCancel(ctx), c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			fmt.Fprintf(os.Stderr, "meepa-bench: remove container %s: %v\n", c.ID, err)
		}
	}()
	hj, err := cli.ContainerAttach(ctx, c.ID, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return err
	}
	defer hj.Close()
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return err
	}
	if _, err := hj.Conn.Write(request); err != nil {
		return err
	}
	if err := hj.CloseWrite(); err != nil {
		return err
	}
	var out, errOut bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errOut, hj.Reader); err != nil {
		return err
	}
	waitC, errC := cli.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
	select {
	case w := <-waitC:
		if w.StatusCode != 0 {
			return fmt.Errorf("exit %d: %s", w.StatusCode, errOut.String())
		}
	case err := <-errC:
		return err
	}
	if err := checkReply(out.Bytes()); err != nil {
		return err
	}
	return cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
}

func checkReply(out []byte) error {
	var r agent.Reply
	if err := json.Unmarshal(out, &r); err != nil {
		return fmt.Errorf("unexpected reply %q: %w", out, err)
	}
	if r.ErrorKind != "" || !strings.HasPrefix(r.Reply, "offline:") {
		return fmt.Errorf("unexpected reply %q", out)
	}
	return nil
}

// dockerRunArgs are (a)'s flags spelled for the CLI, from the same spec.
func dockerRunArgs(spec sandbox.Spec) ([]string, error) {
	cfg, hc, _, err := sandbox.HardenedSpec(spec, "bench")
	if err != nil {
		return nil, err
	}
	args := []string{"run", "--rm", "-i", "--read-only", "--cap-drop", "ALL",
		"--memory", fmt.Sprint(hc.Memory), "--memory-swap", fmt.Sprint(hc.MemorySwap),
		"--pids-limit", fmt.Sprint(*hc.PidsLimit), "--ipc", string(hc.IpcMode),
		"--network", string(hc.NetworkMode), "--user", cfg.User, "--log-driver", hc.LogConfig.Type,
		"--oom-score-adj", fmt.Sprint(hc.OomScoreAdj), "--cgroupns", string(hc.CgroupnsMode),
		"--hostname", cfg.Hostname, "--no-healthcheck", "-w", cfg.WorkingDir,
		"--mount", fmt.Sprintf("type=bind,src=%s,dst=%s,bind-propagation=rprivate", spec.Workspace, sandbox.WorkspaceDir),
		"--entrypoint", cfg.Entrypoint[0]}
	for _, o := range hc.SecurityOpt {
		// The API takes the seccomp profile inline; the CLI reads a file.
		if prof, ok := strings.CutPrefix(o, "seccomp="); ok {
			f := filepath.Join(filepath.Dir(spec.Workspace), "seccomp.json")
			if err := os.WriteFile(f, []byte(prof), 0o644); err != nil {
				return nil, err
			}
			o = "seccomp=" + f
		}
		args = append(args, "--security-opt", o)
	}
	for _, u := range hc.Ulimits {
		args = append(args, "--ulimit", fmt.Sprintf("%s=%d:%d", u.Name, u.Soft, u.Hard))
	}
	for dst, o := range hc.Tmpfs {
		args = append(args, "--tmpfs", dst+":"+o)
	}
	for _, e := range cfg.Env {
		args = append(args, "-e", e)
	}
	for k, v := range cfg.Labels {
		args = append(args, "--label", k+"="+v)
	}
	args = append(args, cfg.Image)
	return append(args, cfg.Entrypoint[1:]...), nil
}

func dockerRun(args []string, request []byte) error {
	cmd := exec.Command("docker", args...)
	cmd.Stdin = bytes.NewReader(request)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("docker run: %w: %s", err, stderr.String())
	}
	return checkReply(out)
}

// benchRunner is an in-process runner served on a unix socket.
type benchRunner struct {
	srv    *runner.Server
	client *http.Client
	token  string
}

// startRunner serves a container-mode runner; runtime "" is the daemon's
// default (runc).
func startRunner(ctx context.Context, dir, id, ws string, prestart bool, runtime string) (*benchRunner, error) {
	return serveRunner(ctx, &agentspec.Config{
		AgentID:   id,
		Workspace: ws,
		Listen:    "unix://" + filepath.Join(dir, id+".sock"),
		Token:     "bench-" + id,
		QueueSize: 64,
		Container: agentspec.ContainerMode{Enabled: true, Image: runnerImage, TimeoutSeconds: 60, Network: "none", Prestart: prestart, Runtime: runtime},
		LLM:       agentspec.LLMConfig{Provider: "offline"},
	}, nil)
}

// serveRunner serves cfg in process on its unix socket; newBackend nil is
// backends.New.
func serveRunner(ctx context.Context, cfg *agentspec.Config, newBackend runner.BackendFactory) (*benchRunner, error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "runner", Level: hclog.LevelFromString(envOr("MEEPA_LOG_LEVEL", "warn")), Output: os.Stderr})
	if cfg.Journal == "" {
		// As the provider deploys every runner: each accepted message is
		// journalled, and the bench pays for it.
		cfg.Journal = filepath.Join(filepath.Dir(strings.TrimPrefix(cfg.Listen, "unix://")), cfg.AgentID+"-journal")
	}
	srv, err := runner.New(ctx, cfg, runner.Options{Logger: log, NewBackend: newBackend})
	if err != nil {
		return nil, err
	}
	ln, err := runner.Listen(cfg.Listen)
	if err != nil {
		return nil, errors.Join(err, srv.Shutdown(ctx))
	}
	go func() {
		if err := srv.Serve(ln); err != nil {
			fmt.Fprintf(os.Stderr, "meepa-bench: runner serve: %v\n", err)
		}
	}()
	path := strings.TrimPrefix(cfg.Listen, "unix://")
	return &benchRunner{srv: srv, token: cfg.Token, client: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 8,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}}, nil
}

func (r *benchRunner) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.srv.Shutdown(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "meepa-bench: runner shutdown: %v\n", err)
	}
}

func (r *benchRunner) send() error {
	req, _ := http.NewRequest(http.MethodPost, "http://runner/v1/messages", strings.NewReader(`{"text":"`+benchText+`"}`))
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return checkReply(body)
}

func (r *benchRunner) health() (runner.Health, error) {
	var h runner.Health
	resp, err := r.client.Get("http://runner/healthz")
	if err != nil {
		return h, err
	}
	defer func() { _ = resp.Body.Close() }()
	return h, json.NewDecoder(resp.Body).Decode(&h)
}

// waitReady waits until /healthz says a prestarted container is waiting
// and nothing runs.
func (r *benchRunner) waitReady() error {
	return r.waitFor(func(h runner.Health) bool { return h.Ready && !h.Busy })
}

func (r *benchRunner) waitIdle() error {
	return r.waitFor(func(h runner.Health) bool { return !h.Busy })
}

func (r *benchRunner) waitFor(ok func(runner.Health) bool) error {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		h, err := r.health()
		if err == nil && ok(h) {
			return nil
		}
	}
	return fmt.Errorf("runner not ready within a minute")
}

// backToBack sends n messages to each runner, one after another per runner
// and all runners at once, and returns messages per second overall.
func backToBack(rs []*benchRunner, n int) (float64, error) {
	var wg sync.WaitGroup
	errs := make(chan error, len(rs))
	t0 := time.Now()
	for _, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				if err := r.send(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n*len(rs)) / time.Since(t0).Seconds(), nil
}

// buildImages makes the busybox base and the runner image with a freshly
// built agent-runner (the daemon's build cache makes repeats cheap).
func buildImages(ctx context.Context, cli *client.Client) error {
	if err := testimage.Busybox(ctx, cli, baseImage); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "meepa-bench-bin-")
	if err != nil {
		return err
	}
	defer removeAll(dir)
	bin := filepath.Join(dir, "agent-runner")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/agent-runner")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build agent-runner (run from the repository root): %w\n%s", err, out)
	}
	return testimage.Runner(ctx, cli, runnerImage, baseImage, bin)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// removeAll removes a scratch directory; a failure is reported, not fatal:
// the numbers are already printed.
func removeAll(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "meepa-bench: %v\n", err)
	}
}
