// Package httpbound holds what makes a server's cost to a client who is not
// (yet) authenticated small and fixed: a listener that caps concurrent
// connections and refuses the rest at once, and an http.Server whose
// header size, deadlines and refusals are set so that no connection can
// hold memory or a goroutine for long before it proves who it is.
//
// The egress proxy, the runner's API, the runner's LLM relay and the
// loopback forwarder agent-run gives tools all take traffic from
// whoever can reach them; they share these pieces so the bounds are set
// in one place.
package httpbound

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// MaxRejecting bounds the goroutines that answer connections over a
// Listener's cap; beyond it they are closed unanswered.
const MaxRejecting = 32

// RefuseLinger bounds how long Refuse may take to answer one connection.
const RefuseLinger = time.Second

// Serve serves srv on ln with at most max connections open (see Listener).
// It takes srv.ConnState over (calling any hook already set) so that, at
// the cap, a kept-alive connection idle between requests is closed to make
// room for a new client before that client is refused: connections a
// client keeps open and never reuses cannot lock out the next one.
func Serve(srv *http.Server, ln net.Listener, max int, reject func(net.Conn)) error {
	l := Listener(ln, max, reject)
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		l.track(c, st)
		if prev != nil {
			prev(c, st)
		}
	}
	return srv.Serve(l)
}

// Listener caps the connections accepted from ln at max. A connection over
// the cap first displaces an idle one (when the server reports idle
// connections to ConnState, as Serve arranges); else it is handed to
// reject (on a goroutine of its own, at most MaxRejecting at once, else
// closed unanswered) instead of waiting unseen in the accept queue; reject
// must close it. A nil reject answers 503 (Refuse with ServiceUnavailable).
func Listener(ln net.Listener, max int, reject func(net.Conn)) *Limited {
	if reject == nil {
		reject = func(c net.Conn) { Refuse(c, ServiceUnavailable) }
	}
	return &Limited{Listener: ln, sem: make(chan struct{}, max), rejecting: make(chan struct{}, MaxRejecting),
		reject: reject, idle: map[net.Conn]struct{}{}}
}

// ServiceUnavailable is the raw answer Refuse sends by default.
const ServiceUnavailable = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: 26\r\n\r\ntoo many open connections\n"

// Refuse writes a raw HTTP answer to c within RefuseLinger and closes it.
// The answer is a courtesy to a client over the cap: when it cannot be
// written in time, closing is the answer.
func Refuse(c net.Conn, answer string) {
	_ = c.SetDeadline(time.Now().Add(RefuseLinger))
	_, _ = io.WriteString(c, answer)
	_ = c.Close()
}

// Limited is the listener Listener returns.
type Limited struct {
	net.Listener
	sem       chan struct{}
	rejecting chan struct{}
	reject    func(net.Conn)

	mu   sync.Mutex
	idle map[net.Conn]struct{} // kept-alive connections between requests
}

// track records which accepted connections sit idle (an http.Server's
// ConnState hook).
func (l *Limited) track(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st == http.StateIdle {
		l.idle[c] = struct{}{}
	} else {
		delete(l.idle, c)
	}
}

// evictIdle closes one idle connection, which frees its slot; false when
// none is idle.
func (l *Limited) evictIdle() bool {
	l.mu.Lock()
	var victim net.Conn
	for c := range l.idle {
		victim = c
		delete(l.idle, c)
		break
	}
	l.mu.Unlock()
	if victim == nil {
		return false
	}
	_ = victim.Close()
	return true
}

func (l *Limited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
		// Answering takes a goroutine each; under a flood, beyond a small
		// bound, drop the connection without an answer.
		select {
		case l.rejecting <- struct{}{}:
			go func() {
				defer func() { <-l.rejecting }()
				l.reject(c)
			}()
		default:
			_ = c.Close() // dropped unanswered: nothing to report to
		}
	}
}

// admit takes a slot for c, displacing idle connections while there are
// some; nil when every slot holds a connection that is busy.
func (l *Limited) admit(c net.Conn) net.Conn {
	for {
		select {
		case l.sem <- struct{}{}:
			return &limitedConn{Conn: c, release: func() { <-l.sem }}
		default:
		}
		if !l.evictIdle() {
			return nil
		}
	}
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes a TCP or unix client so that a tunnel can end one
// direction.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
