package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
)

// connect resolves the target, keeps only addresses the policy permits and
// dials exactly those, one by one. It returns the connection and the IP it
// connected to (or the refused one).
// cidrs, when not empty, confine the addresses to those ranges (the
// credential's Policy.CIDRs).
func (s *Server) connect(ctx context.Context, t Target, cidrs []netip.Prefix) (net.Conn, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.DialTimeout)
	defer cancel()

	var addrs []netip.Addr
	explicit := false
	if t.IP.IsValid() {
		// An IP-literal allowlist entry names its address on purpose, so it
		// is exempt from the special-range refusal (only that exact IP).
		addrs, explicit = []netip.Addr{t.IP}, true
	} else {
		// Rooted, so a resolv.conf search list never turns "intranet" into
		// "intranet.corp.example": the client asked for this exact name.
		found, err := s.opts.Resolver.LookupNetIP(ctx, "ip", t.Host+".")
		if err != nil {
			return nil, "", &refusal{status: http.StatusForbidden, reason: "resolution failure: " + resolveErr(err)}
		}
		if len(found) == 0 {
			return nil, "", &refusal{status: http.StatusForbidden, reason: "resolution failure: no addresses"}
		}
		for _, a := range found {
			addrs = append(addrs, a.Unmap().WithZone(""))
		}
	}

	var permitted []netip.Addr
	var firstRefusal *refusal
	for _, a := range addrs {
		if len(cidrs) > 0 && !containsAddr(cidrs, a) {
			if firstRefusal == nil {
				firstRefusal = &refusal{status: http.StatusForbidden, reason: "address " + a.String() + " is outside the agent's allow_cidrs", ip: a.String()}
			}
			continue
		}
		if why := s.refusedRange(a, explicit); why != "" {
			if firstRefusal == nil {
				firstRefusal = &refusal{status: http.StatusForbidden, reason: "private address " + a.String() + ": " + why, ip: a.String()}
			}
			s.log.Debug("skipping refused address", "host", t.Host, "ip", a.String(), "range", why)
			continue
		}
		permitted = append(permitted, a)
	}
	if len(permitted) == 0 {
		return nil, "", firstRefusal
	}

	var errs []error
	for _, a := range permitted {
		addr := netip.AddrPortFrom(a, t.Port).String()
		conn, err := s.dial(context.WithValue(ctx, vettedKey{}, a), "tcp", addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// The Control hook vetted the address before connect; check the
		// connected socket's peer as well, so a dialer that somehow went
		// elsewhere is caught.
		var peer netip.Addr
		if tcp, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
			peer = tcp.AddrPort().Addr().Unmap().WithZone("")
		}
		if peer != a {
			_ = conn.Close() // never used: the refusal is the result
			return nil, peer.String(), &refusal{status: http.StatusForbidden, reason: "connected to an unvetted address " + peer.String(), ip: peer.String()}
		}
		return conn, a.String(), nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return nil, permitted[0].String(), fmt.Errorf("upstream unreachable: %s", strings.Join(msgs, "; "))
}

// refusedRange says why a is refused, or "" if it may be dialed.
func (s *Server) refusedRange(a netip.Addr, explicit bool) string {
	why := SpecialRange(a)
	if why == "" || explicit {
		return ""
	}
	for _, p := range s.opts.AllowPrivate {
		if p.Contains(a) {
			return ""
		}
	}
	return why
}

func containsAddr(list []netip.Prefix, a netip.Addr) bool {
	for _, p := range list {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

type vettedKey struct{}

// controlDial runs after the socket exists and before connect(2): the
// address must be the one connect vetted, and still pass the policy. It is
// the last line against a code path that dials a name (and so resolves it
// again, the DNS-rebinding hole).
func (s *Server) controlDial(ctx context.Context, network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("proxy: refusing to dial %q: not an IP address", address)
	}
	got := ap.Addr().Unmap().WithZone("")
	want, ok := ctx.Value(vettedKey{}).(netip.Addr)
	if !ok || got != want {
		return fmt.Errorf("proxy: refusing to dial %s: not the vetted address", got)
	}
	if why := SpecialRange(got); why != "" {
		// explicit (IP-literal) exemptions are already reflected in want;
		// a range exemption must still hold.
		if s.refusedRange(got, false) != "" && !s.explicitIP(got, ap.Port()) {
			return fmt.Errorf("proxy: refusing to dial %s: %s", got, why)
		}
	}
	return nil
}

func (s *Server) explicitIP(a netip.Addr, port uint16) bool {
	_, ok := s.opts.Allow.Match(Target{Host: a.String(), IP: a, Port: port})
	return ok
}

func resolveErr(err error) string {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		switch {
		case dnsErr.IsNotFound:
			return "no such host"
		case dnsErr.IsTimeout:
			return "timeout"
		}
		return dnsErr.Err
	}
	return err.Error()
}
