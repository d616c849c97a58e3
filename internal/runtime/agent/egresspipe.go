package agent

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
)

// pipeConns caps the egress pipe's open connections, as the relay
// forwarder's are (forwarderConns).
const pipeConns = 32

// proxyVars are the variables that name the tools' proxy.
var proxyVars = []string{"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"}

// egressPipe serves the runner's broker socket to tool processes on a
// loopback TCP port (clients take a proxy URL, not a unix socket), byte
// for byte: CONNECT, TLS and the credential pass unchanged, and the
// broker checks them. It returns the port's host:port.
func egressPipe(socket string) (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("egress pipe: %w", err)
	}
	slots := make(chan struct{}, pipeConns)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by stop
			}
			select {
			case slots <- struct{}{}:
			default:
				_ = c.Close() // over the cap: refused, as a full proxy would
				continue
			}
			go func() {
				defer func() { <-slots }()
				pipe(c, socket)
			}()
		}
	}()
	return ln.Addr().String(), func() { _ = ln.Close() }, nil
}

// pipe copies between the tool's connection and a new one to socket
// until either side ends.
func pipe(c net.Conn, socket string) {
	defer func() { _ = c.Close() }() // the tool sees its connection end
	up, err := net.Dial("unix", socket)
	if err != nil {
		return
	}
	defer func() { _ = up.Close() }()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // either side's error ends the pipe
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
	<-done
	<-done
}

// viaPipe points every proxy variable of env at addr, keeping its
// userinfo (the message's credential): appended last, since exec and
// the fetch tool take the last of duplicate names.
func viaPipe(env []string, addr string) []string {
	out := env
	for _, k := range proxyVars {
		for i := len(env) - 1; i >= 0; i-- {
			v, ok := strings.CutPrefix(env[i], k+"=")
			if !ok {
				continue
			}
			if u, err := url.Parse(v); err == nil && u.Host != "" {
				u.Host = addr
				out = append(out, k+"="+u.String())
			}
			break
		}
	}
	return out
}
