// Package podio frames the one stdin/stdout pair a message pod has. On
// Kubernetes the runner reaches a per-message pod only through an attach,
// so the request, the reply and the loop's connection to the runner's LLM
// relay share it: no network route from the pod is needed for the model,
// and none for the key, which stays with the runner.
//
// A stream is a sequence of frames: one kind byte, a big-endian uint32
// payload length, the payload. Runner to pod: the request as KindRequest
// frames ended by an empty one, then the relay's bytes as KindRelay frames.
// Pod to runner: KindRelay frames (the loop's side of the relay) and
// KindReply frames (the reply document). The end of either stream (EOF)
// ends everything on it. A payload is at most MaxPayload bytes, so a
// reader never holds more than that for a peer it does not trust.
package podio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Frame kinds.
const (
	KindRequest byte = 'q'
	KindReply   byte = 'o'
	KindRelay   byte = 'r'
)

// MaxPayload bounds one frame's payload; writers split larger writes.
const MaxPayload = 1 << 20

const headerLen = 5

// Writer frames writes onto one stream. It is safe for concurrent use:
// every frame is written whole, under one lock.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter frames onto w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write sends p as frames of kind, split at MaxPayload. An empty p sends one
// empty frame (the end of a request).
func (w *Writer) Write(kind byte, p []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for first := true; first || len(p) > 0; first = false {
		n := min(len(p), MaxPayload)
		var h [headerLen]byte
		h[0] = kind
		binary.BigEndian.PutUint32(h[1:], uint32(n))
		if _, err := w.w.Write(h[:]); err != nil {
			return err
		}
		if _, err := w.w.Write(p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// Of is an io.Writer that sends what is written to it as frames of kind.
func (w *Writer) Of(kind byte) io.Writer { return kindWriter{w, kind} }

type kindWriter struct {
	w    *Writer
	kind byte
}

func (k kindWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := k.w.Write(k.kind, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ReadFrame reads one frame. A payload over MaxPayload is an error, and so
// is a stream that ends inside a frame.
func ReadFrame(r io.Reader) (kind byte, payload []byte, err error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("podio: stream ends inside a frame header")
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > MaxPayload {
		return 0, nil, fmt.Errorf("podio: frame of %d bytes, more than %d", n, MaxPayload)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("podio: stream ends inside a frame: %w", err)
	}
	return h[0], payload, nil
}

// ReadRequest reads KindRequest frames up to the empty one that ends them,
// at most max bytes in all.
func ReadRequest(r io.Reader, max int) ([]byte, error) {
	var req []byte
	for {
		kind, p, err := ReadFrame(r)
		if err != nil {
			return nil, fmt.Errorf("podio: read request: %w", err)
		}
		if kind != KindRequest {
			return nil, fmt.Errorf("podio: frame %q before the request ended", kind)
		}
		if len(p) == 0 {
			return req, nil
		}
		if len(req)+len(p) > max {
			return nil, fmt.Errorf("podio: request is more than %d bytes", max)
		}
		req = append(req, p...)
	}
}

// WriteRequest sends req as KindRequest frames and the empty frame that
// ends it.
func WriteRequest(w *Writer, req []byte) error {
	if len(req) > 0 {
		if err := w.Write(KindRequest, req); err != nil {
			return err
		}
	}
	return w.Write(KindRequest, nil)
}

// Demux reads frames from r until it ends and writes each payload to the
// sink of its kind. A kind without a sink, or a sink that fails, ends the
// demux with an error; a clean EOF returns nil.
func Demux(r io.Reader, sinks map[byte]io.Writer) error {
	for {
		kind, p, err := ReadFrame(r)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		sink, ok := sinks[kind]
		if !ok {
			return fmt.Errorf("podio: unexpected frame %q", kind)
		}
		if len(p) == 0 {
			continue
		}
		if _, err := sink.Write(p); err != nil {
			return fmt.Errorf("podio: frame %q: %w", kind, err)
		}
	}
}

// Conn is one end of the relay connection carried on a framed stream: it
// reads what the demux of the other direction delivers and writes
// KindRelay frames. Deadlines are not supported (they are accepted and
// ignored): the message's own timeout ends the stream, and with it the
// connection.
type Conn struct {
	in  *io.PipeReader
	out io.Writer
}

// Pipe makes a relay connection that writes to w and reads what is
// written to the returned sink (which the demux of the other direction
// feeds).
func Pipe(w *Writer) (*Conn, *Sink) {
	pr, pw := io.Pipe()
	return &Conn{in: pr, out: w.Of(KindRelay)}, &Sink{pw: pw}
}

// Sink feeds a Conn's reads. Bytes that arrive after the Conn was closed
// are dropped: a late write of the peer must not break the stream the
// reply still travels on.
type Sink struct{ pw *io.PipeWriter }

func (s *Sink) Write(p []byte) (int, error) {
	n, err := s.pw.Write(p)
	if errors.Is(err, net.ErrClosed) {
		return len(p), nil
	}
	return n, err
}

// End makes the Conn's reads return err after what was written, or io.EOF
// for a nil err.
func (s *Sink) End(err error) { _ = s.pw.CloseWithError(err) } // a pipe writer's close cannot fail

func (c *Conn) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *Conn) Write(p []byte) (int, error) { return c.out.Write(p) }

// Close ends reading; what the peer sends after it is refused.
func (c *Conn) Close() error {
	return c.in.CloseWithError(net.ErrClosed) // a pipe reader's close cannot fail
}

// The addresses name the stream; there is no network behind it.
func (c *Conn) LocalAddr() net.Addr              { return addr{} }
func (c *Conn) RemoteAddr() net.Addr             { return addr{} }
func (c *Conn) SetDeadline(time.Time) error      { return nil }
func (c *Conn) SetReadDeadline(time.Time) error  { return nil }
func (c *Conn) SetWriteDeadline(time.Time) error { return nil }

type addr struct{}

func (addr) Network() string { return "podio" }
func (addr) String() string  { return "attach" }
