package testutil

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNSServer is a tiny authoritative DNS server in the outside namespace.
type DNSServer struct {
	Addr    string        // ip:53
	Queries *atomic.Int64 // questions answered, over UDP and TCP
}

// StartDNS serves A records for names (lowercase, rooted: "allowed.test.")
// on the namespace's address, port 53, over UDP and TCP, and NXDOMAIN for
// anything else. It stops in t.Cleanup.
func (o *Outside) StartDNS(t testing.TB, names map[string]string) *DNSServer {
	t.Helper()
	return StartDNSInNetns(t, "/run/netns/"+o.NS, o.Addr(53), names)
}

// StartDNSInNetns is StartDNS on addr (ip:port) inside the network
// namespace at nsPath (e.g. the test cluster's, testkube.Netns).
func StartDNSInNetns(t testing.TB, nsPath, addr string, names map[string]string) *DNSServer {
	t.Helper()
	pc, err := inNetns(nsPath, func() (net.PacketConn, error) { return net.ListenPacket("udp", addr) })
	if err != nil {
		t.Fatalf("dns: listen udp on %s in %s: %v", addr, nsPath, err)
	}
	Cleanup(t, "close dns udp socket", func() error { return Gone(pc.Close()) })
	ln, err := listenInNetns(nsPath, addr)
	if err != nil {
		t.Fatalf("dns: listen tcp on %s in %s: %v", addr, nsPath, err)
	}
	Cleanup(t, "close listener", func() error { return Gone(ln.Close()) })
	srv := &DNSServer{Addr: addr, Queries: new(atomic.Int64)}
	go serveDNSPackets(pc, names, srv.Queries)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveDNSConn(c, names, srv.Queries)
		}
	}()
	return srv
}

// StartLoopbackDNS serves the same answers over UDP on 127.0.0.1, on a free
// port, for tests that need no namespace. It stops in t.Cleanup.
func StartLoopbackDNS(t testing.TB, names map[string]string) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	Cleanup(t, "close dns udp socket", func() error { return Gone(pc.Close()) })
	queries := new(atomic.Int64)
	go serveDNSPackets(pc, names, queries)
	return netip.MustParseAddrPort(pc.LocalAddr().String()), queries
}

// serveDNSPackets answers UDP queries until pc is closed.
func serveDNSPackets(pc net.PacketConn, names map[string]string, queries *atomic.Int64) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if out := answerDNS(names, buf[:n], queries); out != nil {
			_, _ = pc.WriteTo(out, from)
		}
	}
}

// serveDNSConn answers length-prefixed queries on one TCP connection.
func serveDNSConn(c net.Conn, names map[string]string, queries *atomic.Int64) {
	defer func() { _ = c.Close() }() // the reply is written or the client is gone
	for {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		req := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		out := answerDNS(names, req, queries)
		if out == nil {
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
			return
		}
	}
}

func answerDNS(names map[string]string, raw []byte, queries *atomic.Int64) []byte {
	var req dnsmessage.Message
	if err := req.Unpack(raw); err != nil || len(req.Questions) != 1 {
		return nil
	}
	queries.Add(1)
	q := req.Questions[0]
	resp := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: req.ID, Response: true, Authoritative: true, RecursionDesired: req.RecursionDesired, RecursionAvailable: true},
		Questions: req.Questions,
	}
	ip, ok := names[strings.ToLower(q.Name.String())]
	switch {
	case !ok:
		resp.RCode = dnsmessage.RCodeNameError
	case q.Type == dnsmessage.TypeA:
		resp.Answers = []dnsmessage.Resource{{
			Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1},
			Body:   &dnsmessage.AResource{A: netip.MustParseAddr(ip).As4()},
		}}
	}
	out, err := resp.Pack()
	if err != nil {
		return nil
	}
	return out
}
