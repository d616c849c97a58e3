package sandbox

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/docker/docker/pkg/stdcopy"
)

// output collects a container's stdout and stderr from its attach stream,
// from attach on: a prestarted container's stream is read while it waits,
// so that its end (the container died) is known without asking the daemon.
type output struct {
	mu     sync.Mutex
	stdout Capped
	stderr Tail
	// final, when set, is asked whenever a newline arrives on stdout; true
	// closes settled (once).
	final   func(stdout []byte) bool
	settled chan struct{}
	isFinal bool

	done chan struct{} // closes when the stream ends
	err  error         // why it ended, nil for EOF
}

func readOutput(r io.Reader, final func([]byte) bool) *output {
	o := &output{
		stdout:  Capped{Max: agentspec.MaxReplyBytes},
		stderr:  Tail{Max: StderrTailLen},
		final:   final,
		settled: make(chan struct{}),
		done:    make(chan struct{}),
	}
	go func() {
		_, err := stdcopy.StdCopy(outWriter{o, true}, outWriter{o, false}, r)
		o.mu.Lock()
		o.err = err
		o.mu.Unlock()
		close(o.done)
	}()
	return o
}

// ended reports whether the stream has ended (the container has exited or
// the daemon connection is gone).
func (o *output) ended() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// snapshot copies what has arrived so far.
func (o *output) snapshot() (stdout, stderr []byte, over bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bytes.Clone(o.stdout.Buf), bytes.Clone(o.stderr.Bytes()), o.stdout.Over
}

func (o *output) copyErr() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

type outWriter struct {
	o      *output
	stdout bool
}

func (w outWriter) Write(p []byte) (int, error) {
	o := w.o
	o.mu.Lock()
	defer o.mu.Unlock()
	if !w.stdout {
		return o.stderr.Write(p)
	}
	n, err := o.stdout.Write(p)
	if o.final != nil && !o.isFinal && !o.stdout.Over && bytes.IndexByte(p, '\n') >= 0 && o.final(o.stdout.Buf) {
		o.isFinal = true
		close(o.settled)
	}
	return n, err
}

// ErrReplyTooLarge is the error of a sandbox that wrote more than agentspec.MaxReplyBytes
// bytes on stdout. agent-run cuts its reply to fit (agent.FitReply), so
// only a sandbox that does not run it faithfully gets this; what it wrote
// is dropped.
var ErrReplyTooLarge = fmt.Errorf("the sandbox wrote more than %d bytes on stdout (the reply cap); its reply is dropped", agentspec.MaxReplyBytes)

// Capped keeps up to Max bytes (in Buf) and notes overflow (Over), and
// keeps draining so the sandbox is never blocked on a full pipe. Every
// backend collects a message's stdout with it.
type Capped struct {
	Buf  []byte
	Max  int
	Over bool
}

func (c *Capped) Write(p []byte) (int, error) {
	if room := c.Max - len(c.Buf); room > 0 {
		if len(p) > room {
			c.Buf = append(c.Buf, p[:room]...)
			c.Over = true
		} else {
			c.Buf = append(c.Buf, p...)
		}
	} else if len(p) > 0 {
		c.Over = true
	}
	return len(p), nil
}

// Tail keeps the last Max bytes written: a message's stderr, for errors.
type Tail struct {
	buf []byte
	Max int
}

func (t *Tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.Max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.Max:]...)
	}
	return len(p), nil
}

// Bytes is what is kept.
func (t *Tail) Bytes() []byte {
	if len(t.buf) > t.Max {
		return t.buf[len(t.buf)-t.Max:]
	}
	return t.buf
}

var _ io.Writer = (*Capped)(nil)
