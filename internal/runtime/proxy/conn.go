package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/httpbound"
)

// pipe copies src to dst until EOF or error, then half-closes dst so the
// other direction can finish; it returns the bytes copied.
func pipe(dst idleConn, src io.Reader) int64 {
	n, err := io.Copy(dst, src)
	// Errors closing are not the tunnel's: the bytes are counted, and a
	// peer that already went away is what ends most tunnels.
	if cw, ok := dst.Conn.(interface{ CloseWrite() error }); ok && err == nil {
		_ = cw.CloseWrite()
	} else {
		// An error (idle timeout, reset) ends both directions.
		_ = dst.Close()
		if c, ok := src.(interface{ Close() error }); ok {
			_ = c.Close()
		}
	}
	return n
}

// activity is the last time a byte moved in either direction of one
// connection pair.
type activity struct{ last atomic.Int64 }

func (a *activity) touch()               { a.last.Store(time.Now().UnixNano()) }
func (a *activity) since() time.Duration { return time.Since(time.Unix(0, a.last.Load())) }

// idleConn extends its deadline on every read and write, and only gives up
// on a timeout when neither direction has moved for idle: a download that
// streams while the client sends nothing keeps the tunnel alive.
type idleConn struct {
	net.Conn
	idle time.Duration
	act  *activity
}

func (c idleConn) Read(p []byte) (int, error) {
	for {
		// A connection that cannot take a deadline fails the read below.
		_ = c.SetReadDeadline(time.Now().Add(c.idle))
		n, err := c.Conn.Read(p)
		if n > 0 {
			c.act.touch()
		}
		if err != nil && n == 0 && isTimeout(err) && c.act.since() < c.idle {
			continue
		}
		return n, err
	}
}

func (c idleConn) Write(p []byte) (int, error) {
	_ = c.SetWriteDeadline(time.Now().Add(c.idle)) // as in Read
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.act.touch()
	}
	return n, err
}

// readerWithIdle reads the client side of a tunnel: from the buffered
// prefix and then the connection, with the idle rule of idleConn.
type readerWithIdle struct {
	r    io.Reader
	conn idleConn
}

func (r readerWithIdle) Read(p []byte) (int, error) {
	for {
		_ = r.conn.SetReadDeadline(time.Now().Add(r.conn.idle)) // as in idleConn.Read
		n, err := r.r.Read(p)
		if n > 0 {
			r.conn.act.touch()
		}
		if err != nil && n == 0 && isTimeout(err) && r.conn.act.since() < r.conn.idle {
			continue
		}
		return n, err
	}
}

func (r readerWithIdle) Close() error { return r.conn.Close() }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// countingReader counts a forwarded request body. The Transport writes
// and closes it on its own goroutine, possibly after RoundTrip returned;
// closed tells when the count is final.
type countingReader struct {
	r      io.ReadCloser
	n      atomic.Int64
	before func()
	once   sync.Once
	closed chan struct{}
}

func newCountingReader(r io.ReadCloser, before func()) *countingReader {
	return &countingReader{r: r, before: before, closed: make(chan struct{})}
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.before()
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingReader) Close() error {
	err := c.r.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

// final waits (bounded) until the Transport is done with the body.
func (c *countingReader) final(wait time.Duration) int64 {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-c.closed:
	case <-t.C:
	}
	return c.n.Load()
}

// deadlineWriter extends the client connection's write deadline before
// every write of a forwarded response.
type deadlineWriter struct {
	w    io.Writer
	rc   *http.ResponseController
	idle time.Duration
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	// A writer without deadlines (not a net/http one) just writes.
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.idle))
	return d.w.Write(p)
}

// reject answers a connection over Options.MaxConns (httpbound.Listener
// hands it over): a 503, and an audit line, which is what counts.
func (s *Server) reject(c net.Conn) {
	start := time.Now()
	httpbound.Refuse(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: 40\r\n\r\nmeepa proxy: too many open connections\r\n")
	if err := s.audit.write(AuditRecord{
		Time: start.UTC().Format(time.RFC3339Nano), Client: c.RemoteAddr().String(),
		Decision: DecisionDeny, Reason: "too many open connections", Status: http.StatusServiceUnavailable,
		DurationMS: durationMS(time.Since(start)),
	}); err != nil {
		s.log.Error("audit write failed", "error", err)
	}
}

// readConn is a connection whose reads come from r (the buffered start of
// a hijacked connection, then the connection).
type readConn struct {
	net.Conn
	r io.Reader
}

func (c readConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// counted counts the bytes written to a connection.
type counted struct {
	net.Conn
	wrote int64
}

func (c *counted) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.wrote += int64(n)
	return n, err
}
