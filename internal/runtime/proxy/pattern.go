package proxy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultPatternPort is the port an allowlist pattern without one means:
// ThreeGate's proxy egresses to tcp/443 only, so a bare host is an HTTPS host.
const DefaultPatternPort = 443

// Pattern is one parsed allowlist entry. Exactly one of IP (valid) or Host
// (non-empty) is set.
type Pattern struct {
	// Host is the lowercased name without a trailing dot; for a wildcard it
	// is the suffix after "*." (e.g. "example.com" for "*.example.com").
	Host string
	// Wildcard makes Host match its subdomains (at any depth) and not Host
	// itself.
	Wildcard bool
	// IP is set when the pattern is an IP literal; it is unmapped
	// (::ffff:1.2.3.4 becomes 1.2.3.4).
	IP netip.Addr
	// Port is 1..65535.
	Port uint16
}

// String renders the pattern in its canonical form, the one ParsePattern
// gives back unchanged: "*.example.com:443", "1.2.3.4:443", "[::1]:443".
func (p Pattern) String() string {
	var host string
	switch {
	case p.IP.IsValid():
		host = p.IP.String()
	case p.Wildcard:
		host = "*." + p.Host
	default:
		host = p.Host
	}
	if p.IP.Is6() {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(int(p.Port))
}

// MarshalText writes the canonical form, so a Pattern travels (in JSON, a
// record, a flag) as the text ParsePattern reads.
func (p Pattern) MarshalText() ([]byte, error) {
	if p.Port == 0 || (!p.IP.IsValid() && p.Host == "") {
		return nil, errors.New("allow pattern: empty pattern")
	}
	return []byte(p.String()), nil
}

// UnmarshalText parses with ParsePattern: an entry that does not parse is
// an error, never kept as it was.
func (p *Pattern) UnmarshalText(b []byte) error {
	q, err := ParsePattern(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// Match reports whether the pattern allows the target. host must be
// normalized the way Target does it (lowercase, no trailing dot) and ip is
// set when the target is an IP literal.
func (p Pattern) Match(t Target) bool {
	if p.Port != t.Port {
		return false
	}
	if p.IP.IsValid() || t.IP.IsValid() {
		return p.IP.IsValid() && t.IP.IsValid() && p.IP == t.IP
	}
	if p.Wildcard {
		return strings.HasSuffix(t.Host, "."+p.Host)
	}
	return p.Host == t.Host
}

// ParsePattern parses one allowlist entry. The grammar, case-insensitive,
// with one trailing dot on a name ignored:
//
//	host              a DNS name; port 443
//	host:port         port 1..65535
//	*.domain[:port]   any subdomain of domain, at any depth, but not domain itself
//	1.2.3.4[:port]    an IPv4 literal
//	[2001:db8::1][:port]  an IPv6 literal, always in brackets
//
// A scheme ("https://"), a path, a query, userinfo ("user@"), whitespace, an
// empty host, a wildcard anywhere but a leading "*.", a bare "*", an IPv6
// zone, and a port of 0, above 65535 or not a number are errors.
func ParsePattern(s string) (Pattern, error) {
	if err := rejectURLParts(s); err != nil {
		return Pattern{}, fmt.Errorf("allow pattern %q: %w", s, err)
	}
	host, port, err := splitHostPort(s, DefaultPatternPort)
	if err != nil {
		return Pattern{}, fmt.Errorf("allow pattern %q: %w", s, err)
	}
	p := Pattern{Port: port}
	if ip, ok, err := parseIPHost(host); err != nil {
		return Pattern{}, fmt.Errorf("allow pattern %q: %w", s, err)
	} else if ok {
		p.IP = ip
		return p, nil
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		p.Wildcard = true
		host = rest
	}
	name, err := normalizeName(host)
	if err != nil {
		return Pattern{}, fmt.Errorf("allow pattern %q: %w", s, err)
	}
	if p.Wildcard && !strings.Contains(name, ".") {
		// "*.com" would open a whole top-level domain; nobody means that.
		return Pattern{}, fmt.Errorf("allow pattern %q: a wildcard needs at least two labels after \"*.\" (e.g. *.example.com)", s)
	}
	p.Host = name
	return p, nil
}

// Allowlist is an ordered list of patterns; a target is allowed when any
// pattern matches it.
type Allowlist []Pattern

// ParseAllowlist parses every entry and reports all bad ones at once, each
// error naming its index, so a plan shows every mistake in one go.
func ParseAllowlist(entries []string) (Allowlist, error) {
	list := make(Allowlist, 0, len(entries))
	var errs []error
	seen := map[Pattern]bool{}
	for i, e := range entries {
		p, err := ParsePattern(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("allow[%d]: %w", i, err))
			continue
		}
		if !seen[p] {
			seen[p] = true
			list = append(list, p)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return list, nil
}

// Match returns the first pattern that allows the target.
func (a Allowlist) Match(t Target) (Pattern, bool) {
	for _, p := range a {
		if p.Match(t) {
			return p, true
		}
	}
	return Pattern{}, false
}

// Strings renders the list in canonical form.
func (a Allowlist) Strings() []string {
	out := make([]string, len(a))
	for i, p := range a {
		out[i] = p.String()
	}
	return out
}

// Target is a normalized request destination.
type Target struct {
	Host string     // lowercase name without trailing dot, or the IP's text
	IP   netip.Addr // set when the request named an IP literal
	Port uint16
}

// String renders host:port, IPv6 in brackets.
func (t Target) String() string {
	if t.IP.Is6() {
		return "[" + t.Host + "]:" + strconv.Itoa(int(t.Port))
	}
	return t.Host + ":" + strconv.Itoa(int(t.Port))
}

// ParseTarget parses a request's authority ("host:port", "[v6]:port", or a
// bare host when defaultPort is non-zero) with the same host rules as
// ParsePattern, minus the wildcard.
func ParseTarget(authority string, defaultPort uint16) (Target, error) {
	if err := rejectURLParts(authority); err != nil {
		return Target{}, fmt.Errorf("target %q: %w", authority, err)
	}
	host, port, err := splitHostPort(authority, defaultPort)
	if err != nil {
		return Target{}, fmt.Errorf("target %q: %w", authority, err)
	}
	if ip, ok, err := parseIPHost(host); err != nil {
		return Target{}, fmt.Errorf("target %q: %w", authority, err)
	} else if ok {
		return Target{Host: ip.String(), IP: ip, Port: port}, nil
	}
	name, err := normalizeName(host)
	if err != nil {
		return Target{}, fmt.Errorf("target %q: %w", authority, err)
	}
	return Target{Host: name, Port: port}, nil
}

func rejectURLParts(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case strings.Contains(s, "://"):
		return errors.New("has a scheme; write host or host:port, without https://")
	case strings.ContainsAny(s, "/"):
		return errors.New("has a path; write host or host:port only")
	case strings.ContainsAny(s, "?#"):
		return errors.New("has a query or fragment; write host or host:port only")
	case strings.Contains(s, "@"):
		return errors.New("has userinfo (user@); credentials do not belong in an allowlist")
	case strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return errors.New("contains whitespace or control characters")
	}
	return nil
}

// splitHostPort splits "host", "host:port", "[v6]" or "[v6]:port". A bare
// host gets defaultPort, or is an error when defaultPort is 0.
func splitHostPort(s string, defaultPort uint16) (string, uint16, error) {
	var host, portStr string
	hasPort := false
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, errors.New("missing ']' after IPv6 address")
		}
		host = s[:end+1]
		rest := s[end+1:]
		switch {
		case rest == "":
		case strings.HasPrefix(rest, ":"):
			portStr, hasPort = rest[1:], true
		default:
			return "", 0, fmt.Errorf("unexpected %q after ']'", rest)
		}
	} else {
		switch strings.Count(s, ":") {
		case 0:
			host = s
		case 1:
			i := strings.IndexByte(s, ':')
			host, portStr, hasPort = s[:i], s[i+1:], true
		default:
			return "", 0, errors.New("an IPv6 address must be in brackets, e.g. [2001:db8::1]:443")
		}
	}
	if host == "" || host == "[]" {
		return "", 0, errors.New("empty host")
	}
	if !hasPort {
		if defaultPort == 0 {
			return "", 0, errors.New("missing port")
		}
		return host, defaultPort, nil
	}
	port, err := parsePort(portStr)
	if err != nil {
		return "", 0, err
	}
	return host, port, nil
}

func parsePort(s string) (uint16, error) {
	if s == "" {
		return 0, errors.New("empty port after ':'")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("port %q is not a number", s)
		}
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > 65535 {
		return 0, fmt.Errorf("port %s is out of range 1-65535", s)
	}
	if n == 0 {
		return 0, errors.New("port 0 is not allowed (1-65535)")
	}
	return uint16(n), nil
}

// parseIPHost recognises IP literals: dotted IPv4, and IPv6 in brackets.
// ok is false for anything that should be treated as a name.
func parseIPHost(host string) (netip.Addr, bool, error) {
	if strings.HasPrefix(host, "[") {
		inner := strings.TrimSuffix(host[1:], "]")
		if strings.Contains(inner, "%") {
			return netip.Addr{}, false, errors.New("IPv6 zones (%eth0) are not allowed")
		}
		ip, err := netip.ParseAddr(inner)
		if err != nil || !ip.Is6() {
			return netip.Addr{}, false, fmt.Errorf("%q is not an IPv6 address", inner)
		}
		return ip.Unmap(), true, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is4() {
		return ip, true, nil
	}
	return netip.Addr{}, false, nil
}

// normalizeName lowercases, drops one trailing dot and checks DNS name
// syntax: labels of 1..63 letters, digits, '-' or '_' (not at either end
// for '-'), at most 253 characters, and a last label that is not all digits
// (so "127.1" or "1.2.3.999" never pass as names a resolver might read as
// an address).
func normalizeName(host string) (string, error) {
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if name == "" {
		return "", errors.New("empty host")
	}
	if strings.Contains(name, "*") {
		return "", errors.New("a wildcard is only allowed as a leading \"*.\" (e.g. *.example.com)")
	}
	if len(name) > 253 {
		return "", errors.New("host name longer than 253 characters")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" {
			return "", errors.New("empty label in host name (\"..\" or a leading dot)")
		}
		if len(l) > 63 {
			return "", fmt.Errorf("label %q is longer than 63 characters", l)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("label %q starts or ends with '-'", l)
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return "", fmt.Errorf("character %q is not allowed in a host name (use punycode for international names)", r)
			}
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" {
		return "", fmt.Errorf("%q looks like an IPv4 address but is not a valid one", host)
	}
	return name, nil
}
