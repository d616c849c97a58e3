package sandbox

import (
	"bytes"
	"io"
	"sync"

	"github.com/docker/docker/pkg/stdcopy"
)

// output collects a container's stdout and stderr from its attach stream,
// from attach on: a prestarted container's stream is read while it waits,
// so that its end (the container died) is known without asking the daemon.
type output struct {
	mu     sync.Mutex
	stdout capped
	stderr tail
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
		stdout:  capped{max: MaxStdout},
		stderr:  tail{max: StderrTailLen},
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
	return bytes.Clone(o.stdout.buf), bytes.Clone(o.stderr.bytes()), o.stdout.over
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
	if o.final != nil && !o.isFinal && !o.stdout.over && bytes.IndexByte(p, '\n') >= 0 && o.final(o.stdout.buf) {
		o.isFinal = true
		close(o.settled)
	}
	return n, err
}

// capped keeps up to max bytes and notes overflow, and keeps draining so
// the container is never blocked on a full pipe.
type capped struct {
	buf  []byte
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - len(c.buf); room > 0 {
		if len(p) > room {
			c.buf = append(c.buf, p[:room]...)
			c.over = true
		} else {
			c.buf = append(c.buf, p...)
		}
	} else if len(p) > 0 {
		c.over = true
	}
	return len(p), nil
}

// tail keeps the last max bytes written.
type tail struct {
	buf []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) bytes() []byte {
	if len(t.buf) > t.max {
		return t.buf[len(t.buf)-t.max:]
	}
	return t.buf
}

var _ io.Writer = (*capped)(nil)
