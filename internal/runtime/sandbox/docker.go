package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/prestart"
)

// Limits on what a container may send back. The reply is one JSON document;
// anything past agentspec.MaxReplyBytes is a protocol error (ErrReplyTooLarge), not
// memory for the runner: the rest is read and dropped.
const (
	StderrTailLen = 4 << 10
	// cleanupTimeout bounds kill and remove, which run on a fresh context so
	// that a cancelled request still cleans up.
	cleanupTimeout = 15 * time.Second
)

// DockerOptions configure a Docker backend. Prestart is the only knob beyond
// the container Spec.
type DockerOptions struct {
	Spec Spec
	// Prestart keeps the next container created, started, attached and
	// waiting on stdin, so a message does not wait for a container start.
	Prestart bool
	// ChownWorkspace makes the workspace (recursively) owned by the
	// container user at start-up so the non-root agent can write it. It needs
	// the workspace at the same path on this machine and CAP_CHOWN; turn it
	// off when the operator owns the directory already.
	ChownWorkspace bool
	// Enforcement, when set, must pass before any container starts and
	// before a prestarted one receives a message (fail closed).
	Enforcement EnforcementCheck
	// Final, when set, is asked as the container's stdout grows; true means
	// the output so far is the whole answer and the container exits
	// cleanly right after it (agentspec.FinalReply), so Run answers without
	// waiting for the daemon to process the exit. The exit is still
	// awaited, off the answer's path, and no later message reaches a
	// container before it is confirmed. Nil waits for every exit.
	Final  func(stdout []byte) bool
	Logger hclog.Logger
}

// Docker runs each message in a fresh hardened container through the Docker
// Engine API.
type Docker struct {
	cli  client.APIClient
	opts DockerOptions
	log  hclog.Logger

	// instance labels this backend's containers; any other container of
	// the agent belongs to a runner that is gone.
	instance string
	stop     chan struct{} // ends the janitor

	pool *prestart.Pool[*attached] // the prestarted container

	mu     sync.Mutex
	closed bool
	// removing closes when the last cold-started container is removed.
	removing <-chan struct{}
	// prev is the end of the last message's container: a prestarted
	// container gets its message only after it.
	prev *ending
	bg   sync.WaitGroup // containers being removed, image ids being asked
}

// LabelInstance names the backend instance (one runner process) that made
// a per-message container.
const LabelInstance = engine.LabelPrefix + "runner-instance"

// janitorEvery is how often containers of a dead runner are looked for
// after start-up. A runner killed in the middle of a create leaves a
// container that the daemon finishes after the start-up sweep.
const janitorEvery = 30 * time.Second

// refillHeadStart is how long a message runs before its replacement
// container starts, unless it finishes sooner.
const refillHeadStart = 250 * time.Millisecond

// attached is a created container with its stdin/stdout attached.
type attached struct {
	id      string
	hijack  types.HijackedResponse
	out     *output
	started time.Time
	latency time.Duration
	// image is the container's image id, asked once it started.
	image     string
	imageDone chan struct{}
}

// ending is a used container on its way out; done closes once its
// processes are known to be gone (its exit seen, or it was removed), and
// err says why that could not be confirmed.
type ending struct {
	id   string
	done chan struct{}
	err  error
}

// NewDocker checks the spec, removes this agent's orphan containers (left
// by a crash), owns the workspace for the container user and, with
// prestart, starts the first waiting container.
func NewDocker(ctx context.Context, cli client.APIClient, o DockerOptions) (*Docker, error) {
	if _, _, _, err := HardenedSpec(o.Spec, ""); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	var inst [8]byte
	_, _ = rand.Read(inst[:])
	d := &Docker{cli: cli, opts: o, log: log.Named("docker"), instance: hex.EncodeToString(inst[:]), stop: make(chan struct{})}
	d.pool = prestart.New(prestart.Funcs[*attached]{
		Start: func(ctx context.Context) (*attached, error) { return d.startContainer(ctx, "") },
		// The output stream of a container that died (killed by an
		// operator, the daemon restarted) has ended: no call to the
		// daemon needed.
		Alive:   func(c *attached) bool { return !c.out.ended() },
		Discard: d.discard,
		Timeout: 2 * time.Minute,
		Noun:    "container",
		IDKey:   "container_id",
		ID:      func(c *attached) string { return short(c.id) },
		Log:     d.log,
	})
	// Orphans go first: one still running could swap a directory of the
	// workspace for a symlink while the walk below chowns its entries, and
	// make a root runner chown a host file to the sandbox user.
	n, err := RemoveOrphans(ctx, cli, o.Spec.AgentID)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		d.log.Info("removed orphan containers", "count", n)
	}
	if o.ChownWorkspace {
		if err := chownTree(o.Spec); err != nil {
			return nil, err
		}
	}
	if o.Prestart {
		d.pool.Refill(ctx)
	}
	d.bg.Add(1)
	go d.janitor()
	return d, nil
}

// janitor removes containers of this agent that another (dead) runner
// instance made: soon after start, then every janitorEvery.
func (d *Docker) janitor() {
	defer d.bg.Done()
	t := time.NewTimer(3 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		d.sweepForeign()
		t.Reset(janitorEvery)
	}
}

// sweepForeign force-removes the agent's containers not made by this
// instance.
func (d *Docker) sweepForeign() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: OrphanFilter(d.opts.Spec.AgentID)})
	if err != nil {
		d.log.Warn("list orphan containers", "error", err)
		return
	}
	for _, c := range list {
		if c.Labels[LabelInstance] != d.instance {
			d.log.Info("removing orphan container", "container_id", short(c.ID))
			_ = d.remove(c.ID)
		}
	}
}

// chownTree gives the workspace to the container user. Files the provider
// wrote as root (SOUL.md, skills) must be writable by the agent too.
func chownTree(s Spec) error {
	u, err := s.uidGid()
	if err != nil {
		return err
	}
	us, gs, _ := strings.Cut(u, ":")
	uid, _ := strconv.Atoi(us)
	gid, _ := strconv.Atoi(gs)
	// No link followed, no other filesystem entered: the agent owns what
	// is in its workspace and could plant a link to /etc there.
	err = ChownTree(s.Workspace, uid, gid)
	if err != nil {
		return fmt.Errorf("workspace %s: make it owned by %s: %w", s.Workspace, u, err)
	}
	return nil
}

// OrphanFilter selects the per-message containers of one agent.
func OrphanFilter(agentID string) filters.Args {
	return filters.NewArgs(
		filters.Arg("label", engine.LabelManagedBy+"="+engine.ManagedByValue),
		filters.Arg("label", engine.LabelComponent+"="+Component),
		filters.Arg("label", LabelAgent+"="+agentID),
	)
}

// RemoveOrphans force-removes every per-message container of agentID and
// returns how many it removed.
func RemoveOrphans(ctx context.Context, cli client.APIClient, agentID string) (int, error) {
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: OrphanFilter(agentID)})
	if err != nil {
		return 0, fmt.Errorf("list orphan containers: %w", err)
	}
	var errs []error
	removed := 0
	for _, c := range list {
		err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		switch {
		case err == nil:
			removed++
		case !cerrdefs.IsNotFound(err):
			errs = append(errs, fmt.Errorf("remove orphan container %s: %w", c.ID[:12], err))
		}
	}
	return removed, errors.Join(errs...)
}

// Ready reports whether a prestarted container is waiting.
func (d *Docker) Ready() bool { return d.pool.Ready() }

// RelayLink: every container mounts the relay's socket directory
// (Spec.RelayDir).
func (d *Docker) RelayLink() RelayLink { return RelayMounted }

// Close discards the prestarted container and waits for background starts
// and removals to finish.
func (d *Docker) Close(ctx context.Context) error {
	d.mu.Lock()
	if !d.closed {
		close(d.stop)
	}
	d.closed = true
	d.mu.Unlock()
	defer d.sweepForeign()
	// The pool first: a removal that ends after it asks for no refill.
	err := d.pool.Close(ctx)
	if ctx.Err() != nil {
		return err // the pool's error holds ctx's
	}
	done := make(chan struct{})
	go func() { d.bg.Wait(); close(done) }()
	select {
	case <-done:
		return err
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
}

// Run runs one job in a fresh container: the prestarted one if there is
// one (it has never seen a message), else one made now. The container is
// always removed, after the answer.
func (d *Docker) Run(ctx context.Context, job Job) (Outcome, error) {
	begin := time.Now()
	if job.Timeout <= 0 {
		job.Timeout = agentspec.DefaultTimeout
	}
	// The timeout covers the whole message, a slow start included.
	ctx, cancel := context.WithTimeout(ctx, job.Timeout)
	defer cancel()
	c, prestarted, err := d.acquire(ctx, job)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Outcome{TimedOut: true, StartLatency: time.Since(begin)}, nil
		}
		return Outcome{}, err
	}
	out := Outcome{SandboxID: c.id}
	if prestarted {
		// Only the part the message waited for counts: zero for a container
		// that was ready, the rest of its start for one that was starting.
		if w := c.started.Sub(begin); w > 0 {
			out.StartLatency = w
		}
	} else {
		out.StartLatency = time.Since(begin)
	}
	stopRefill := func() func() { return nil }
	if d.opts.Prestart {
		// The replacement starts once the message has had a head start or
		// its container is gone, whichever comes first: on a small host
		// a start beside a short message slows its reply and exit.
		stopRefill = d.pool.RefillSoon(ctx, refillHeadStart)
	}
	awaitExit, err := d.exchange(ctx, c, job, &out)
	d.retire(c, awaitExit, stopRefill())
	return out, err
}

// acquire returns the container for a message: the prestarted one when it
// is still waiting, else one started now; either way only once the gate
// lets the message through.
func (d *Docker) acquire(ctx context.Context, job Job) (*attached, bool, error) {
	if d.opts.Prestart {
		c, ok, err := d.pool.Take(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("wait for prestarted container: %w", err)
		}
		if ok {
			// It may have been started while the rules were in force and
			// they have gone since: it must not see the message then.
			if err := d.gate(ctx, true); err != nil {
				_ = d.discard(c)
				return nil, false, err
			}
			return c, true, nil
		}
	}
	// Without prestart the previous container is removed before this one
	// is made: side by side the daemon does both slower.
	d.mu.Lock()
	removing := d.removing
	d.mu.Unlock()
	if removing != nil && !d.opts.Prestart {
		select {
		case <-removing:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	c, err := d.startContainer(ctx, job.MessageID)
	if err != nil {
		return nil, false, err
	}
	// startContainer asked the enforcement check just before the start.
	if err := d.gate(ctx, false); err != nil {
		_ = d.discard(c)
		return nil, false, err
	}
	return c, false, nil
}

// gate holds a message back until the previous message's container is
// gone (no process of one message runs beside the next) and, with
// enforce, until the enforcement check passes. The two are awaited side by
// side; the check is asked for every message, never taken from an earlier
// answer.
func (d *Docker) gate(ctx context.Context, enforce bool) error {
	d.mu.Lock()
	prev := d.prev
	d.mu.Unlock()
	var enfErr error
	enfDone := make(chan struct{})
	if enforce && d.opts.Enforcement != nil {
		go func() {
			defer close(enfDone)
			enfErr = d.enforced(ctx)
		}()
	} else {
		close(enfDone)
	}
	prevErr := d.waitEnded(ctx, prev)
	<-enfDone
	if enfErr != nil {
		return enfErr
	}
	return prevErr
}

// waitEnded waits until e's container is gone. One whose exit could not be
// confirmed is removed now (a forced remove kills it and waits), or the
// message is refused.
func (d *Docker) waitEnded(ctx context.Context, e *ending) error {
	if e == nil {
		return nil
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if e.err == nil {
		return nil
	}
	if err := d.remove(e.id); err != nil {
		return fmt.Errorf("the previous message's container %s is not confirmed gone: %w", short(e.id), err)
	}
	return nil
}

// exitGrace is how long a container that gave its final reply may take to
// exit before it is killed.
const exitGrace = 10 * time.Second

// retire ends a used container off the answer's path: it confirms the exit
// when the exchange did not (a final reply), removes the container and
// then, when refill is set, starts the replacement. The next message waits
// for the confirmed exit (d.prev), a cold start without prestart for the
// removal too (d.removing).
func (d *Docker) retire(c *attached, awaitExit bool, refill func()) {
	e := &ending{id: c.id, done: make(chan struct{})}
	removed := make(chan struct{})
	d.mu.Lock()
	d.prev, d.removing = e, removed
	d.mu.Unlock()
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		defer close(removed)
		var err error
		if awaitExit {
			err = d.awaitExit(c)
		}
		c.hijack.Close()
		if err == nil {
			close(e.done)
		}
		rerr := d.remove(c.id)
		if err != nil {
			// Removed is gone too: the daemon kills before it removes.
			e.err = rerr
			close(e.done)
		}
		if refill != nil {
			refill()
		}
	}()
}

// awaitExit waits for a container that gave its final reply to exit, as
// it does right after it; one that lingers is killed after exitGrace. An
// exit that contradicts the final reply is logged.
func (d *Docker) awaitExit(c *attached) error {
	t := time.NewTimer(exitGrace)
	defer t.Stop()
	select {
	case <-c.out.done:
	case <-t.C:
		d.log.Warn("container still runs after its final reply; killing it", "container_id", short(c.id))
		d.kill(c.id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	waitC, errC := d.cli.ContainerWait(ctx, c.id, container.WaitConditionNotRunning)
	select {
	case w := <-waitC:
		if w.StatusCode != 0 {
			d.log.Warn("container exited non-zero after its final reply", "container_id", short(c.id), "exit_code", w.StatusCode)
		}
		return nil
	case err := <-errC:
		if cerrdefs.IsNotFound(err) {
			return nil // removed out of band: gone
		}
		return fmt.Errorf("container wait: %w", err)
	}
}

func (d *Docker) kill(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := d.cli.ContainerKill(ctx, id, "KILL"); err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		d.log.Warn("container kill", "container_id", short(id), "error", err)
	}
}

// startContainer creates, attaches and starts one container. Docker only
// streams output to attachments made before start, so attach comes first.
func (d *Docker) startContainer(ctx context.Context, messageID string) (_ *attached, err error) {
	t0 := time.Now()
	label := messageID
	if label == "" {
		label = "prestart"
	}
	cfg, hc, nc, err := HardenedSpec(d.opts.Spec, label)
	if err != nil {
		return nil, err
	}
	cfg.Labels[LabelInstance] = d.instance
	name := containerName(d.opts.Spec.AgentID)
	created, err := d.cli.ContainerCreate(ctx, cfg, hc, nc, nil, name)
	if err != nil {
		return nil, fmt.Errorf("container create: %w", err)
	}
	c := &attached{id: created.ID}
	defer func() {
		if err != nil {
			if rerr := d.remove(c.id); rerr != nil {
				d.log.Warn("container remove after failed create", "container_id", short(c.id), "error", rerr)
			}
			if c.hijack.Conn != nil {
				c.hijack.Close()
			}
		}
	}()
	for _, n := range d.opts.Spec.Networks[min(1, len(d.opts.Spec.Networks)):] {
		if err := d.cli.NetworkConnect(ctx, n, c.id, &network.EndpointSettings{}); err != nil {
			return nil, fmt.Errorf("network connect %s: %w", n, err)
		}
	}
	c.hijack, err = d.cli.ContainerAttach(ctx, c.id, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, fmt.Errorf("container attach: %w", err)
	}
	c.out = readOutput(c.hijack.Reader, d.opts.Final)
	// Asked as late as possible: the container joins its networks at start.
	if err := d.enforced(ctx); err != nil {
		return nil, err
	}
	if err := d.cli.ContainerStart(ctx, c.id, container.StartOptions{}); err != nil {
		return nil, fmt.Errorf("container start: %w", err)
	}
	c.started = time.Now()
	c.latency = c.started.Sub(t0)
	d.askImage(c)
	return c, nil
}

// askImage learns the container's image id beside its run, for an answer
// given before the exit state is read (a final reply); without Final the
// exit state's inspect has it.
func (d *Docker) askImage(c *attached) {
	c.imageDone = make(chan struct{})
	if d.opts.Final == nil {
		close(c.imageDone)
		return
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		defer close(c.imageDone)
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if ins, err := d.cli.ContainerInspect(ctx, c.id); err == nil {
			c.image = ins.Image
		}
	}()
}

func containerName(agentID string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	safe := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '-'
	}, agentID)
	if len(safe) > 40 {
		safe = safe[:40]
	}
	return "meepa-msg-" + safe + "-" + hex.EncodeToString(b[:])
}

// exchange writes the request and reads the reply: until the container
// closes its output or, when Final says so, until its final reply. It
// kills the container at the timeout or when ctx ends. awaitExit says the
// exit is still to be confirmed (retire does it, off the answer's path).
func (d *Docker) exchange(ctx context.Context, c *attached, job Job, out *Outcome) (awaitExit bool, err error) {
	// ctx carries the message's deadline (set in Run).

	// The write runs beside the read: a request bigger than the pipe buffer
	// would otherwise deadlock against an agent that answers early.
	go func() {
		if _, err := c.hijack.Conn.Write(job.Stdin); err != nil {
			d.log.Debug("stdin write", "container_id", short(c.id), "error", err)
		}
		if err := c.hijack.CloseWrite(); err != nil {
			d.log.Debug("stdin close", "container_id", short(c.id), "error", err)
		}
	}()

	t0 := time.Now()
	select {
	case <-c.out.done:
	case <-c.out.settled:
		out.Stdout, out.StderrTail, _ = c.out.snapshot()
		select {
		case <-c.imageDone:
			out.ImageID = c.image
		case <-ctx.Done():
		}
		d.log.Debug("final reply", "container_id", short(c.id), "reply_ms", time.Since(t0).Milliseconds())
		return true, nil
	case <-ctx.Done():
		out.TimedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
		d.kill(c.id)
		c.hijack.Close()
		// Cut short by the kill: not reported, since ctx is done (below).
		<-c.out.done
	}
	c.hijack.Close()
	tEOF := time.Now()
	stdout, stderr, over := c.out.snapshot()
	out.Stdout, out.StderrTail = stdout, stderr
	copyErr := c.out.copyErr()
	if err := d.exitState(ctx, c, out); err != nil {
		return true, err
	}
	d.log.Debug("exchange timings", "container_id", short(c.id), "reply_ms", tEOF.Sub(t0).Milliseconds(),
		"exit_ms", time.Since(tEOF).Milliseconds())
	if over {
		return false, ErrReplyTooLarge
	}
	if copyErr != nil && !out.TimedOut && ctx.Err() == nil {
		return false, fmt.Errorf("read container output: %w", copyErr)
	}
	if ctx.Err() != nil && !out.TimedOut {
		return false, ctx.Err()
	}
	return false, nil
}

// exitState reads the exit code and OOM state of an exited container, on
// a fresh bounded context: it must be read even when the request was
// cancelled, and OOM is only known from inspect.
func (d *Docker) exitState(ctx context.Context, c *attached, out *Outcome) error {
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer scancel()
	waitC, errC := d.cli.ContainerWait(sctx, c.id, container.WaitConditionNotRunning)
	select {
	case w := <-waitC:
		out.ExitCode = int(w.StatusCode)
	case err := <-errC:
		return fmt.Errorf("container wait: %w", err)
	}
	ins, err := d.cli.ContainerInspect(sctx, c.id)
	switch {
	case cerrdefs.IsNotFound(err):
		// Removed out of band after it exited: the reply and the exit code
		// are in hand; only the OOM flag is lost.
		d.log.Warn("container removed before inspect; OOM state unknown", "container_id", short(c.id))
	case err != nil:
		return fmt.Errorf("container inspect: %w", err)
	}
	out.ImageID = ins.Image
	if ins.State != nil {
		out.ExitCode = ins.State.ExitCode
		out.OOMKilled = ins.State.OOMKilled
	}
	return nil
}

func (d *Docker) discard(c *attached) error {
	c.hijack.Close()
	return d.remove(c.id)
}

// remove force-removes a container on a fresh bounded context; gone is done.
func (d *Docker) remove(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	err := d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		// Already being removed counts as removed.
		if cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress") {
			return nil
		}
		d.log.Warn("container remove", "container_id", short(id), "error", err)
		return fmt.Errorf("container remove %s: %w", short(id), err)
	}
	return nil
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

var _ Backend = (*Docker)(nil)
