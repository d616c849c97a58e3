package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/podio"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// podRun is a running pod with its container's stdin, stdout and stderr
// attached. Stdin and stdout carry podio frames: the request, the reply
// and the LLM relay's connection (agent-run --frames).
type podRun struct {
	name    string
	started time.Time
	stdin   *io.PipeWriter
	in      *podio.Writer
	stdout  *sandbox.Capped
	stderr  *sandbox.Tail
	// relay and relaySink are the runner's end of the relay connection on
	// the stream; the demux of stdout feeds relaySink.
	relay     *podio.Conn
	relaySink *podio.Sink
	// streamed closes when the attach ends (the container exited or the
	// stream broke); streamErr is then set.
	streamed  chan struct{}
	streamErr error
	cancel    context.CancelFunc
	// imageID is the image the container runs, from its running status.
	imageID string
	// confirming: answered early, the pod is deleted once its exit is seen
	// (confirmExit), not right after the exchange.
	confirming bool
}

func (r *podRun) alive() bool {
	select {
	case <-r.streamed:
		return false
	default:
		return true
	}
}

// startPod creates a pod, waits until its container runs and attaches to
// it. The agent reads its request before it writes anything, so nothing is
// lost between start and attach.
func (k *Pods) startPod(ctx context.Context, messageID string) (_ *podRun, err error) {
	spec, err := k.podSpec(ctx)
	if err != nil {
		return nil, err
	}
	pod, err := HardenedPod(spec, k.c.Namespace, messageID)
	if err != nil {
		return nil, err
	}
	pod.Labels[sandbox.LabelInstance] = k.instance
	created, err := k.c.Clientset.CoreV1().Pods(k.c.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod create: %w", err)
	}
	defer func() {
		if err != nil {
			k.deleteAsync(created.Name)
		}
	}()
	running, err := k.waitPod(ctx, created, containerRunning)
	if err != nil {
		return nil, fmt.Errorf("pod %s start: %w", created.Name, err)
	}
	r, err := k.attach(created.Name)
	if err != nil {
		return nil, err
	}
	r.started = time.Now()
	if cs := containerStatus(running); cs != nil {
		r.imageID = cs.ImageID
	}
	return r, nil
}

// podSpec is the spec of the next pod: a FETCH pod's proxy is looked up
// now, so that it names the proxy pod that runs.
func (k *Pods) podSpec(ctx context.Context) (PodSpec, error) {
	s := k.opts.Spec
	if s.Role != topospec.RoleFetch || s.Topology == "" {
		return s, nil
	}
	env, err := ProxyEnv(ctx, k.c, s.Topology)
	if err != nil {
		return s, err
	}
	s.AwaitOpen = append(slices.Clone(s.AwaitOpen), strings.TrimPrefix(env["HTTP_PROXY"], "http://"))
	for name, v := range s.Env {
		if _, set := env[name]; !set {
			env[name] = v
		}
	}
	s.Env = env
	return s, nil
}

// attach opens the container's streams over the API server: WebSocket
// first, SPDY where the server does not upgrade to WebSocket.
func (k *Pods) attach(name string) (*podRun, error) {
	req := k.c.Clientset.CoreV1().RESTClient().Post().
		Namespace(k.c.Namespace).Resource("pods").Name(name).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: ContainerName, Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(k.c.REST, "POST", req.URL())
	if err != nil {
		return nil, fmt.Errorf("pod attach: %w", err)
	}
	ws, err := remotecommand.NewWebSocketExecutor(k.c.REST, "GET", req.URL().String())
	if err != nil {
		return nil, fmt.Errorf("pod attach: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return nil, fmt.Errorf("pod attach: %w", err)
	}
	pr, pw := io.Pipe()
	outR, outW := io.Pipe()
	sctx, cancel := context.WithCancel(context.Background())
	r := &podRun{name: name, stdin: pw, in: podio.NewWriter(pw), stdout: &sandbox.Capped{Max: agentspec.MaxReplyBytes},
		stderr: &sandbox.Tail{Max: sandbox.StderrTailLen}, streamed: make(chan struct{}), cancel: cancel}
	r.relay, r.relaySink = podio.Pipe(r.in)
	demuxed := make(chan error, 1)
	go func() {
		err := podio.Demux(outR, map[byte]io.Writer{podio.KindReply: r.stdout, podio.KindRelay: r.relaySink})
		r.relaySink.End(err)
		// A pod that breaks the framing loses its stream: the attach ends.
		_ = outR.CloseWithError(errors.Join(err, io.ErrClosedPipe)) // a pipe reader's close cannot fail
		demuxed <- err
	}()
	go func() {
		err := ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: pr, Stdout: outW, Stderr: r.stderr})
		_ = outW.Close() // a pipe writer's close cannot fail
		if derr := <-demuxed; derr != nil {
			err = errors.Join(err, fmt.Errorf("reply stream: %w", derr))
		}
		r.streamErr = err
		// A request still being written must not block on a dead stream.
		_ = pr.CloseWithError(io.ErrClosedPipe)
		close(r.streamed)
	}()
	return r, nil
}

// exchange writes the request, reads the reply until the container closes
// its output, and reads the exit state from the pod's status. At the
// timeout (or when ctx ends) the pod is deleted at once.
func (k *Pods) exchange(ctx context.Context, r *podRun, job sandbox.Job, out *sandbox.Outcome) error {
	defer r.cancel()
	t0 := time.Now()
	if k.opts.Relay != nil {
		stop := k.opts.Relay(r.relay)
		defer stop()
	} else {
		// No relay for this message: relay frames from the pod are dropped
		// rather than left to block the demux, and with it the reply.
		_ = r.relay.Close() // closing a pipe end cannot fail
	}
	// The write runs beside the read: a request bigger than the pipe buffer
	// would otherwise deadlock against an agent that answers early. Without
	// a relay nothing more goes in, and stdin ends with the request.
	go func() {
		if err := podio.WriteRequest(r.in, job.Stdin); err != nil {
			k.log.Debug("stdin write", "pod", r.name, "error", err)
		}
		if k.opts.Relay == nil {
			_ = r.stdin.Close() // a pipe writer's close cannot fail
		}
	}()
	select {
	case <-r.streamed:
	case <-ctx.Done():
		out.TimedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
		out.ExitCode = killedExitCode
		dctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		err := deletePod(dctx, k.c, r.name)
		cancel()
		r.cancel()
		<-r.streamed
		out.Stdout, out.StderrTail = r.stdout.Buf, r.stderr.Bytes()
		if err != nil {
			return err
		}
		if !out.TimedOut {
			return ctx.Err()
		}
		return nil
	}
	out.Stdout, out.StderrTail = r.stdout.Buf, r.stderr.Bytes()
	tEOF := time.Now()
	defer func() {
		k.log.Debug("exchange timings", "pod", r.name, "reply_ms", tEOF.Sub(t0).Milliseconds(),
			"exit_state_ms", time.Since(tEOF).Milliseconds())
	}()
	if r.streamErr != nil && ctx.Err() == nil {
		// A broken attach says nothing of the container, which may still
		// wait for its request: no waiting for an exit here.
		return fmt.Errorf("pod %s attach: %w", r.name, r.streamErr)
	}
	if !r.stdout.Over && ctx.Err() == nil && agentspec.FinalReply(out.Stdout) {
		// agent-run, the container's init, found nothing killed for memory
		// and exits right after its reply: answer now. The kubelet reports
		// the exit about a second later; the next message waits for that
		// (awaitPrevious), never this one.
		out.ImageID = r.imageID
		r.confirming = true
		k.confirmExit(r.name)
		return nil
	}
	// The exit state is read even when the request was cancelled meanwhile.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	p, err := k.waitPod(sctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: r.name}}, containerTerminated)
	if err != nil {
		return fmt.Errorf("pod %s exit state: %w", r.name, err)
	}
	cs := containerStatus(p)
	t := cs.State.Terminated
	out.ExitCode = int(t.ExitCode)
	out.OOMKilled = t.Reason == "OOMKilled"
	out.ImageID = cs.ImageID
	if r.stdout.Over {
		return sandbox.ErrReplyTooLarge
	}
	return ctx.Err()
}

// confirmExit waits, off the answer's path, for the kubelet to report the
// exit of a pod whose final reply was answered (or for the pod to be
// gone); awaitPrevious holds the next message until then.
func (k *Pods) confirmExit(name string) {
	gone := &exitWatch{done: make(chan struct{})}
	k.mu.Lock()
	k.previous = gone
	k.mu.Unlock()
	k.bg.Add(1)
	go func() {
		defer k.bg.Done()
		defer close(gone.done)
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		p, err := k.waitPod(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}, containerTerminated)
		switch {
		case apierrors.IsNotFound(err), errors.Is(err, errPodGone):
			// Deleted by someone else: its attach had already ended, that
			// is every process holding the container's stdout was gone.
			gone.ok = true
		case err != nil:
			gone.err = fmt.Errorf("the previous message's pod %s was not seen to exit: %w", name, err)
		default:
			gone.ok = true
			if t := containerStatus(p).State.Terminated; t.ExitCode != 0 {
				k.log.Warn("pod exited non-zero after its final reply", "pod", name, "exit_code", t.ExitCode, "reason", t.Reason)
			}
		}
		// Deleted only now: a forced delete removes the pod from the API
		// before the kubelet has stopped it, which would prove nothing.
		if err := deletePod(ctx, k.c, name); err != nil {
			k.log.Warn("pod delete", "pod", name, "error", err)
		}
	}()
}

// exitWatch is the confirmation of a previous pod's exit.
type exitWatch struct {
	done chan struct{}
	ok   bool
	err  error
}

// awaitPrevious holds a message until the previous message's pod has
// exited, so that no process of one message runs beside the next (they
// share the workspace). A pod that cannot be seen to exit refuses the
// message.
func (k *Pods) awaitPrevious(ctx context.Context) error {
	k.mu.Lock()
	w := k.previous
	k.mu.Unlock()
	if w == nil {
		return nil
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !w.ok {
		return w.err
	}
	return nil
}
