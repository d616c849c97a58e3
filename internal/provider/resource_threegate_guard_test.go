package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// stopGuard stops a topology's guard the way an operator would (Docker
// does not restart it then), so that out-of-band rule changes stay.
func stopGuard(t *testing.T, topo string) {
	t.Helper()
	err := testutil.Docker(t).ContainerStop(context.Background(), guard.Name(topo), container.StopOptions{})
	if err != nil {
		t.Fatalf("stop guard: %v", err)
	}
}

// TestAccThreegateNetwork_failClosed: a CORE agent in a topology with the
// host firewall. First the guard is stopped and the rules removed: the next
// message is refused with 503 not_enforced and no container of the agent
// starts (the prestarted one, started while the rules held, is discarded).
// Then what a boot without a restore does: dockerd stops, the chains are
// removed, dockerd starts. Without anyone running terraform the rules are
// back within 10 s, no container of the agent starts before they are, and
// every message sent all along is answered or refused with a clear error.
//
// It restarts the shared dockerd: run it only under flock /tmp/meepa-acc.lock.
func TestAccThreegateNetwork_failClosed(t *testing.T) {
	testutil.RequireDocker(t)
	f := newTGFixture(t)
	cli := testutil.Docker(t)
	stateDir := t.TempDir()
	id := "tf-acc-agent-fc-" + runID
	cleanupAgent(t, cli, id)
	set := topology.Rules(f.spec(t))
	cfg := fmt.Sprintf(`
terraform {
  required_providers {
    meepa = { source = "bogpad/meepa" }
  }
}

provider "meepa" {
  state_dir = %[1]q
}

resource "threegate_network" "tg" {
  provider         = meepa
  name             = %[2]q
  llmnet_subnet    = %[3]q
  fetchnet_subnet  = %[4]q
  egressnet_subnet = %[5]q
  proxy = {
    image = %[6]q
    allow = ["example.com"]
  }
}

resource "meepa_agent" "core" {
  agent_id = %[7]q
  llm      = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = %[6]q
  }
  threegate = {
    network = threegate_network.tg.id
    role    = "core"
  }
}
`, stateDir, f.name, f.llm, f.fetch, f.egress, f.image, id)

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             f.checkDestroyed(t),
		Steps: []resource.TestStep{{
			Config: cfg,
			Check: func(s *terraform.State) error {
				fc := &failClosed{t: t, cli: cli, agentID: id, topo: f.name, set: set,
					sock:  deploy.LayoutFor(stateDir, id).Socket,
					token: s.RootModule().Resources["meepa_agent.core"].Primary.Attributes["token"]}
				if err := fc.guardStopped(); err != nil {
					return fmt.Errorf("guard stopped: %w", err)
				}
				if err := fc.dockerdRestart(); err != nil {
					return fmt.Errorf("dockerd restart: %w", err)
				}
				return nil
			},
		}},
	})
}

type failClosed struct {
	t          *testing.T
	cli        client.APIClient
	agentID    string
	topo, sock string
	token      string
	set        firewall.Set
}

// outcome is one message's fate, as the client saw it.
type outcome struct {
	sent, done time.Time
	code       int
	kind       string
	reply      string
	err        error
}

func (fc *failClosed) send(text string) outcome {
	o := outcome{sent: time.Now()}
	hc, base := deploy.Listener{Unix: fc.sock}.Client(2 * time.Minute)
	body, _ := json.Marshal(map[string]string{"text": text})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+fc.token)
	resp, err := hc.Do(req)
	if err != nil {
		o.err, o.done = err, time.Now()
		return o
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	o.code, o.done = resp.StatusCode, time.Now()
	if o.code == http.StatusOK {
		var r agent.Reply
		if err := json.Unmarshal(raw, &r); err != nil {
			o.err = fmt.Errorf("reply %q: %w", raw, err)
		}
		o.reply = r.Reply
		return o
	}
	var e runner.ErrorBody
	if err := json.Unmarshal(raw, &e); err != nil || e.Error.Kind == "" || e.Error.Message == "" {
		o.err = fmt.Errorf("status %d without a clear error body: %q", o.code, raw)
	}
	o.kind = e.Error.Kind
	return o
}

// starts lists the start times of the agent's message containers between
// since and until, from the daemon's event log.
func (fc *failClosed) starts(since, until time.Time) ([]time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, errs := fc.cli.Events(ctx, events.ListOptions{
		Since: strconv.FormatInt(since.Unix(), 10), Until: strconv.FormatInt(until.Add(time.Second).Unix(), 10),
		Filters: filters.NewArgs(filters.Arg("type", "container"), filters.Arg("event", "start"),
			// Message containers only: Docker restarts the runner container
			// itself (same agent label) when dockerd comes back, whenever it
			// likes; the runner answers 503 not_enforced until the guard
			// vouches, and runs no message before.
			filters.Arg("label", sandbox.LabelAgent+"="+fc.agentID),
			filters.Arg("label", engine.LabelComponent+"="+sandbox.Component)),
	})
	var out []time.Time
	for {
		select {
		case m := <-msgs:
			at := time.Unix(0, m.TimeNano)
			if !at.Before(since) && !at.After(until) {
				out = append(out, at)
			}
		case err := <-errs:
			if errors.Is(err, io.EOF) || err == nil {
				return out, nil
			}
			return out, err
		}
	}
}

func (fc *failClosed) rulesInPlace() (bool, error) {
	ipt, err := guard.NewIptables("")
	if err != nil {
		return false, err
	}
	live, err := ipt.Read(context.Background(), fc.set)
	if err != nil {
		return false, err
	}
	return len(firewall.Diff(fc.set, live)) == 0, nil
}

func (fc *failClosed) removeRules() error {
	ipt, err := guard.NewIptables("")
	if err != nil {
		return err
	}
	live, err := ipt.Read(context.Background(), fc.set)
	if err != nil {
		return err
	}
	if text := firewall.RemoveText(fc.set, live); text != "" {
		return ipt.Restore(context.Background(), text)
	}
	return nil
}

// waitReady waits for the runner's prestarted container (/healthz ready).
func (fc *failClosed) waitReady() error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		h, err := deploy.CheckHealth(context.Background(), deploy.Listener{Unix: fc.sock})
		if err == nil && h["ready"] == true {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("runner not ready 60 s after the first message: %v %v", h, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// guardStopped: with the guard stopped and the rules gone, a message is
// refused (503 not_enforced) and no container starts; with the guard
// started again, the rules come back and the next message is answered.
func (fc *failClosed) guardStopped() error {
	if o := fc.send("hi"); o.code != 200 || o.reply != agent.OfflineAnswer("hi") {
		return fmt.Errorf("first message: %+v", o)
	}
	// The replacement container is prestarted before the guard stops: its
	// start (checked while the rules were there) must not count as one
	// made without them.
	if err := fc.waitReady(); err != nil {
		return err
	}
	stopGuard(fc.t, fc.topo)
	if err := fc.removeRules(); err != nil {
		return err
	}
	t0 := time.Now()
	o := fc.send("hi")
	if o.code != http.StatusServiceUnavailable || o.kind != runner.KindNotEnforced || o.err != nil {
		return fmt.Errorf("with the rules gone: %d %q %v, want 503 %s", o.code, o.kind, o.err, runner.KindNotEnforced)
	}
	if st, err := fc.starts(t0, time.Now()); err != nil || len(st) > 0 {
		return fmt.Errorf("containers started while the rules were gone: %v (%v)", st, err)
	}
	fc.t.Logf("refused while the guard was stopped: 503 %s", o.kind)
	if err := fc.cli.ContainerStart(context.Background(), guard.Name(fc.topo), container.StartOptions{}); err != nil {
		return err
	}
	begin := time.Now()
	for {
		ok, err := fc.rulesInPlace()
		if err != nil {
			return err
		}
		if ok {
			break
		}
		if time.Since(begin) > 10*time.Second {
			return errors.New("rules not back 10 s after the guard started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	fc.t.Logf("guard started: rules back after %s", time.Since(begin).Round(10*time.Millisecond))
	deadline := time.Now().Add(30 * time.Second)
	for {
		o := fc.send("hi")
		if o.code == 200 && o.reply == agent.OfflineAnswer("hi") {
			fc.t.Logf("answered again %s after the guard started", time.Since(begin).Round(10*time.Millisecond))
			return nil
		}
		if o.kind != runner.KindNotEnforced || time.Now().After(deadline) {
			return fmt.Errorf("after the guard started: %+v", o)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// dockerdRestart: what a reboot without a restore does to the host.
func (fc *failClosed) dockerdRestart() error {
	t := fc.t
	ensure := filepath.Join(testutil.RepoRoot(), "scripts", "ensure-docker.sh")
	// Whatever happens below, the shared daemon is running again afterwards.
	t.Cleanup(func() {
		if out, err := exec.Command(ensure).CombinedOutput(); err != nil {
			t.Errorf("ensure-docker: %v: %s", err, out)
		}
	})
	pid, err := dockerdPID()
	if err != nil {
		return err
	}

	var mu sync.Mutex
	var outs []outcome
	stop := make(chan struct{})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			o := fc.send("hi")
			mu.Lock()
			outs = append(outs, o)
			mu.Unlock()
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-sent
	}()
	time.Sleep(time.Second)

	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop dockerd: %w", err)
	}
	for i := 0; syscall.Kill(pid, 0) == nil; i++ {
		if i > 600 {
			return errors.New("dockerd did not stop within 60 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := fc.removeRules(); err != nil {
		return err
	}
	if ok, err := fc.rulesInPlace(); ok || err != nil {
		return fmt.Errorf("rules still in place after removal (%v)", err)
	}
	tStart := time.Now()
	ensured := make(chan error, 1)
	go func() {
		out, err := exec.Command(ensure).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out)
		}
		ensured <- err
	}()
	var tRules time.Time
	for tRules.IsZero() {
		ok, err := fc.rulesInPlace()
		if err != nil {
			return err
		}
		if ok {
			tRules = time.Now()
			break
		}
		if time.Since(tStart) > 60*time.Second {
			return errors.New("rules not back 60 s after dockerd started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := <-ensured; err != nil {
		return err
	}
	t.Logf("dockerd started; rules back after %s without terraform", tRules.Sub(tStart).Round(10*time.Millisecond))
	if d := tRules.Sub(tStart); d > 10*time.Second {
		return fmt.Errorf("rules back only after %s, want within 10 s", d)
	}

	// Keep sending until a message is answered again.
	deadline := time.Now().Add(90 * time.Second)
	for {
		mu.Lock()
		var last outcome
		if n := len(outs); n > 0 {
			last = outs[n-1]
		}
		mu.Unlock()
		if last.code == 200 && last.sent.After(tRules) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no message answered 90 s after the rules came back; last %+v", last)
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	<-sent

	restored, err := fc.guardRestoredAt(tStart)
	if err != nil {
		return err
	}
	st, err := fc.starts(tStart, time.Now())
	if err != nil {
		return err
	}
	for _, s := range st {
		if s.Before(restored) {
			return fmt.Errorf("a message container started at %s, before the guard restored the rules at %s",
				s.Format(time.StampMilli), restored.Format(time.StampMilli))
		}
	}
	counts := map[string]int{}
	for _, o := range outs {
		switch {
		case o.err != nil && o.code != 0:
			return fmt.Errorf("message sent at %s: %v", o.sent.Format(time.StampMilli), o.err)
		case o.err != nil:
			counts["not delivered: "+shortErr(o.err)]++ // the runner's socket was not there: the sender knows
		case o.code == 200 && o.reply != agent.OfflineAnswer("hi"):
			return fmt.Errorf("200 with a wrong reply %q", o.reply)
		case o.code == 200:
			if o.sent.Before(restored) && o.done.After(restored) {
				// Sent before, answered after: it must have waited for the rules.
				counts["answered (sent while the rules were gone)"]++
			} else {
				counts["answered"]++
			}
		default:
			counts[fmt.Sprintf("refused %d %s", o.code, o.kind)]++
		}
	}
	t.Logf("%d messages during the restart; guard restored the rules %s after dockerd started; %d message containers started, none before; outcomes %v",
		len(outs), restored.Sub(tStart).Round(10*time.Millisecond), len(st), counts)
	return nil
}

// guardRestoredAt is when the guard logged that it put the rules back, by
// the guard's own clock: a moment after the restore and before the
// heartbeat that lets runners start members, where the poll above is up to
// one poll later.
func (fc *failClosed) guardRestoredAt(since time.Time) (time.Time, error) {
	rc, err := fc.cli.ContainerLogs(context.Background(), guard.Name(fc.topo), container.LogsOptions{
		ShowStderr: true, Timestamps: true, Since: strconv.FormatInt(since.Unix(), 10)})
	if err != nil {
		return time.Time{}, err
	}
	defer func() { _ = rc.Close() }()
	var b strings.Builder
	_, _ = stdcopy.StdCopy(&b, &b, rc)
	for _, ln := range strings.Split(b.String(), "\n") {
		_, rest, _ := strings.Cut(ln, " ")
		if !strings.Contains(rest, `"rules restored"`) {
			continue
		}
		// The guard's own time of the line (hclog's @timestamp): taken
		// after the restore and before the heartbeat that lets runners go
		// on. The daemon's stamp on the line can lag behind it.
		var line struct {
			At time.Time `json:"@timestamp"`
		}
		if err := json.Unmarshal([]byte(rest), &line); err == nil && line.At.After(since) {
			return line.At, nil
		}
	}
	return time.Time{}, fmt.Errorf("guard logged no restore since %s:\n%s", since.Format(time.StampMilli), b.String())
}

func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

func dockerdPID() (int, error) {
	out, err := exec.Command("pidof", "dockerd").Output()
	if err != nil {
		return 0, fmt.Errorf("pidof dockerd: %w", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 1 {
		return 0, fmt.Errorf("want one dockerd, found %q", out)
	}
	return strconv.Atoi(f[0])
}
