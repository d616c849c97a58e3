package httpbound

import (
	"errors"
	"io"
	"log"
	"net/http"
	"time"
)

// Limits bound one HTTP server. The deadlines cover what a client controls
// (how fast it sends its request, how fast it reads the answer), never the
// time a handler works: a blocking message may wait in its queue and run
// for its whole timeout, a relayed model call as long as the model takes.
type Limits struct {
	// MaxHeaderBytes bounds a request's headers (net/http adds 4 KiB of
	// slack); over it the client gets 431 and the connection ends.
	MaxHeaderBytes int
	// ReadHeader bounds reading a request's headers, Read its headers and
	// body together. Once the body is read to its end (or the request has
	// none), no read deadline is left on the connection: the server then
	// reads at most one byte until the handler answers.
	ReadHeader, Read time.Duration
	// Write bounds writing an answer, from the moment the handler writes
	// its status on.
	Write time.Duration
	// Idle bounds a kept-alive connection between requests; negative for
	// none (a connection that lives as long as its owner says, as the
	// relay's one connection per message does).
	Idle time.Duration
	// CloseOnRefusal ends the connection after a 401, or after any answer
	// of 400 or more given before the request's body was read: such a
	// body is never read (net/http would otherwise read up to 256 KiB of
	// it, at whatever pace the client trickles it).
	CloseOnRefusal bool
}

// Server is an http.Server for h within l.
func Server(h http.Handler, l Limits, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           l.Handler(h),
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ReadHeaderTimeout: l.ReadHeader,
		ReadTimeout:       l.Read,
		WriteTimeout:      l.Write,
		IdleTimeout:       l.Idle,
		ErrorLog:          errorLog,
	}
}

// Handler wraps h so that the server's read and write deadlines bound the
// client, not h (see Limits).
func (l Limits) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		bw := &writer{ResponseWriter: w, rc: rc, l: l}
		if r.Body == nil || r.Body == http.NoBody {
			bw.bodyDone = true
			bw.released()
		} else {
			r.Body = &body{ReadCloser: r.Body, w: bw}
		}
		h.ServeHTTP(bw, r)
	})
}

// body lifts the deadlines once the request is read whole.
type body struct {
	io.ReadCloser
	w *writer
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.w.bodyDone {
		b.w.bodyDone = true
		b.w.released()
	}
	return n, err
}

type writer struct {
	http.ResponseWriter
	rc          *http.ResponseController
	l           Limits
	bodyDone    bool
	wroteHeader bool
}

// released is called when the request is read whole: from then on the
// handler's own bounds hold the connection, and the answer gets Write from
// its first byte (WriteHeader).
func (w *writer) released() {
	_ = w.rc.SetReadDeadline(time.Time{})
	_ = w.rc.SetWriteDeadline(time.Time{})
}

func (w *writer) WriteHeader(code int) {
	if w.wroteHeader {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.wroteHeader = true
	if w.l.Write > 0 {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.l.Write))
	}
	if w.l.CloseOnRefusal && (code == http.StatusUnauthorized || (code >= 400 && !w.bodyDone)) {
		w.Header().Set("Connection", "close")
		// Whatever is left of the body fails at once instead of being
		// read; the answer is already buffered and still goes out.
		_ = w.rc.SetReadDeadline(time.Now())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *writer) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController (flushes, deadlines) reach the
// server's own writer.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
