package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"

	"github.com/hashicorp/go-hclog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/prestart"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// Timings of the pod backend.
const (
	// cleanupTimeout bounds a delete or the read of an exit state, on a
	// fresh context so that a cancelled message still cleans up.
	cleanupTimeout = 15 * time.Second
	// refillHeadStart is how long a message runs before the next
	// prestarted pod is created, unless it finishes sooner: creating a pod
	// is CPU work for the node, which would slow a short message's reply.
	refillHeadStart = 250 * time.Millisecond
	// prestartTimeout bounds the start of a prestarted pod.
	prestartTimeout = 2 * time.Minute
	// killedExitCode is reported for a pod killed at the timeout: it is
	// deleted at once, so no exit code of its own is ever read.
	killedExitCode = 137
)

// Options configure a pod backend.
type Options struct {
	Spec PodSpec
	// Prestart keeps the next pod created, running and attached, waiting
	// on stdin, so that a message does not wait for a pod start.
	Prestart bool
	// Relay, when set, serves the runner's LLM relay on a connection
	// carried on the pod's own attach (package podio) until the returned
	// stop is called. Nil when the agent uses no relay.
	Relay  func(net.Conn) (stop func())
	Logger hclog.Logger
}

// Pods runs each message in a fresh hardened Pod: the request goes in on
// the container's stdin over an attach, the reply comes back on its stdout,
// and the pod is deleted after.
type Pods struct {
	c    *Client
	opts Options
	log  hclog.Logger
	// instance labels this backend's pods.
	instance string

	pool *prestart.Pool[*podRun] // the prestarted pod

	mu sync.Mutex
	// previous confirms the exit of the last pod answered early (nil: none).
	previous *exitWatch
	bg       sync.WaitGroup // deletions under way
}

// NewPods checks the spec, deletes this agent's pods left by an earlier
// runner (by label) and, with prestart, starts the first waiting pod.
func NewPods(ctx context.Context, c *Client, o Options) (*Pods, error) {
	if _, err := HardenedPod(o.Spec, c.Namespace, ""); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	var inst [8]byte
	_, _ = rand.Read(inst[:])
	k := &Pods{c: c, opts: o, log: log.Named("kube"), instance: hex.EncodeToString(inst[:])}
	k.pool = prestart.New(prestart.Funcs[*podRun]{
		Start: func(ctx context.Context) (*podRun, error) { return k.startPod(ctx, "") },
		// Its attach ends only when the container does: a prestarted pod
		// killed out of band (or by a node restart) never sees the message.
		Alive:   (*podRun).alive,
		Confirm: func(ctx context.Context, r *podRun) bool { return k.stillWaiting(ctx, r.name) },
		Discard: func(r *podRun) error { r.cancel(); k.deleteAsync(r.name); return nil },
		Timeout: prestartTimeout,
		Noun:    "pod",
		IDKey:   "pod",
		ID:      func(r *podRun) string { return r.name },
		Log:     k.log,
	})
	n, err := DeleteAgentPods(ctx, c, o.Spec.AgentID)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		k.log.Info("deleted orphan pods", "count", n)
	}
	if o.Prestart {
		k.pool.Refill(ctx)
	}
	return k, nil
}

// DeleteAgentPods deletes every per-message pod of agentID at once (no
// grace) and returns how many there were.
func DeleteAgentPods(ctx context.Context, c *Client, agentID string) (int, error) {
	pods := c.Clientset.CoreV1().Pods(c.Namespace)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: AgentSelector(agentID)})
	if err != nil {
		return 0, fmt.Errorf("list orphan pods: %w", err)
	}
	var errs []error
	for _, p := range list.Items {
		if err := deletePod(ctx, c, p.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return len(list.Items), errors.Join(errs...)
}

func deletePod(ctx context.Context, c *Client, name string) error {
	err := c.Clientset.CoreV1().Pods(c.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("pod delete %s: %w", name, err)
	}
	return nil
}

// Ready reports whether a prestarted pod is waiting.
func (k *Pods) Ready() bool { return k.pool.Ready() }

// RelayLink: a pod reaches the relay on its own attach (Options.Relay).
func (k *Pods) RelayLink() sandbox.RelayLink { return sandbox.RelayAttached }

// Close deletes the prestarted pod and waits for prestarts and deletions
// under way.
func (k *Pods) Close(ctx context.Context) error {
	// The pool first: its discards are deletions waited for below.
	if err := k.pool.Close(ctx); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { k.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stillWaiting asks the API whether a prestarted pod still runs: a pod
// deleted a moment ago can keep its attach open until the kubelet kills it.
func (k *Pods) stillWaiting(ctx context.Context, name string) bool {
	p, err := k.c.Clientset.CoreV1().Pods(k.c.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	ok, err := containerRunning(p)
	return ok && err == nil
}

// deleteAsync deletes a pod off the reply's path; Close waits for it, and
// a crash in between leaves an orphan that the next start-up deletes.
func (k *Pods) deleteAsync(name string) {
	k.bg.Add(1)
	go func() {
		defer k.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := deletePod(ctx, k.c, name); err != nil {
			k.log.Warn("pod delete", "pod", name, "error", err)
		}
	}()
}

// Run runs one job in a fresh pod: the prestarted one if there is one (it
// has never seen a message), else one made now. The pod is always deleted.
func (k *Pods) Run(ctx context.Context, job sandbox.Job) (sandbox.Outcome, error) {
	begin := time.Now()
	if job.Timeout <= 0 {
		job.Timeout = agentspec.DefaultTimeout
	}
	// The timeout covers the whole message, a slow start included.
	ctx, cancel := context.WithTimeout(ctx, job.Timeout)
	defer cancel()
	timedOut := func() bool { return errors.Is(ctx.Err(), context.DeadlineExceeded) }
	var r *podRun
	var prestarted bool
	if k.opts.Prestart {
		var err error
		if r, prestarted, err = k.pool.Take(ctx); err != nil {
			if timedOut() {
				return sandbox.Outcome{TimedOut: true, StartLatency: time.Since(begin)}, nil
			}
			return sandbox.Outcome{}, fmt.Errorf("wait for prestarted pod: %w", err)
		}
	}
	if !prestarted {
		var err error
		if r, err = k.startPod(ctx, job.MessageID); err != nil {
			if timedOut() {
				return sandbox.Outcome{TimedOut: true, StartLatency: time.Since(begin)}, nil
			}
			return sandbox.Outcome{}, err
		}
	}
	out := sandbox.Outcome{SandboxID: r.name}
	if !prestarted {
		out.StartLatency = time.Since(begin)
	} else if w := r.started.Sub(begin); w > 0 {
		// Only what the message waited for a pod still starting.
		out.StartLatency = w
	}
	if prestarted {
		// The pod keeps its message=prestart label: the runner may not
		// patch pods (labels place a pod under NetworkPolicies), so the
		// link from message to pod is this line and the runner's audit
		// line, which names the pod.
		k.log.Debug("prestarted pod takes a message", "pod", r.name, "message_id", job.MessageID)
	}
	if err := k.awaitPrevious(ctx); err != nil {
		r.cancel()
		k.deleteAsync(r.name)
		if timedOut() {
			return sandbox.Outcome{TimedOut: true, StartLatency: time.Since(begin)}, nil
		}
		return sandbox.Outcome{}, err
	}
	if !k.opts.Prestart {
		err := k.exchange(ctx, r, job, &out)
		k.release(r)
		return out, err
	}
	stopRefill := k.pool.RefillSoon(ctx, refillHeadStart)
	err := k.exchange(ctx, r, job, &out)
	refill := stopRefill()
	k.release(r)
	if refill != nil {
		refill()
	}
	return out, err
}

// release deletes a message's pod after its exchange, unless its exit is
// still being confirmed (confirmExit deletes it then).
func (k *Pods) release(r *podRun) {
	if !r.confirming {
		k.deleteAsync(r.name)
	}
}
