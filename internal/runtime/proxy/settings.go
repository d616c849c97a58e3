package proxy

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// DefaultPort is the port the proxy listens on unless told otherwise
// (unprivileged, so the container needs no capability).
const DefaultPort = 3128

// Settings are what a deployment (the threegate_network resource) decides
// about the proxy; Args turns them into the container's command line.
// Zero values mean the defaults.
type Settings struct {
	// ListenIP restricts the listener to one address (the proxy's pinned
	// fetchnet IP, so it does not listen on egressnet). Default: all.
	ListenIP string
	// Port to listen on; default DefaultPort.
	Port int
	// Allow is the allowlist, parsed: an entry that does not parse cannot
	// be here, so none can be passed on unchecked.
	Allow Allowlist
	// DNS servers ("ip" or "ip:port"); default the container's resolv.conf.
	DNS []string
	// AllowPrivate exempts CIDRs from the special-range refusal.
	AllowPrivate []string
	// Audit is "-" (stdout, the default) or a file path.
	Audit string
	// MaxConns, DialTimeout, IdleTimeout: see Options.
	MaxConns    int
	DialTimeout time.Duration
	IdleTimeout time.Duration
	// UpstreamCA is PEM of CAs a bound host's certificate may chain to
	// besides the system's (an internal API's); "" for none.
	UpstreamCA string
}

// ListenAddr is the address the proxy listens on, e.g. "172.30.1.2:3128".
func (s Settings) ListenAddr() string {
	port := s.Port
	if port == 0 {
		port = DefaultPort
	}
	if s.ListenIP == "" {
		return ":" + strconv.Itoa(port)
	}
	ip, err := netip.ParseAddr(s.ListenIP)
	if err != nil {
		return s.ListenIP + ":" + strconv.Itoa(port)
	}
	return netip.AddrPortFrom(ip, uint16(port)).String()
}

// Args returns the agent-runner arguments that run the proxy with these
// settings, starting with the subcommand: a container's command is
// append([]string{"/usr/local/bin/agent-runner"}, Args(s)...). The allowlist
// is written in canonical form, once per distinct pattern, so equal lists
// give equal commands.
func Args(s Settings) []string {
	args := []string{"proxy", "--listen", s.ListenAddr()}
	seen := map[Pattern]bool{}
	for _, p := range s.Allow {
		if !seen[p] {
			seen[p] = true
			args = append(args, "--allow", p.String())
		}
	}
	for _, d := range s.DNS {
		args = append(args, "--dns", d)
	}
	for _, p := range s.AllowPrivate {
		args = append(args, "--allow-private", p)
	}
	audit := s.Audit
	if audit == "" {
		audit = "-"
	}
	args = append(args, "--audit", audit)
	if s.MaxConns > 0 {
		args = append(args, "--max-conns", strconv.Itoa(s.MaxConns))
	}
	if s.DialTimeout > 0 {
		args = append(args, "--dial-timeout", s.DialTimeout.String())
	}
	if s.IdleTimeout > 0 {
		args = append(args, "--idle-timeout", s.IdleTimeout.String())
	}
	if s.UpstreamCA != "" {
		args = append(args, "--upstream-ca", s.UpstreamCA)
	}
	return args
}

// ParsePrefixes parses CIDRs for AllowPrivate ("10.0.0.0/8", "fd00::/8");
// an address without a length means just that address.
func ParsePrefixes(cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			ip, ipErr := netip.ParseAddr(c)
			if ipErr != nil || ip.Zone() != "" {
				errs = append(errs, fmt.Errorf("allow-private %q is not a CIDR (e.g. 10.0.0.0/8)", c))
				continue
			}
			p = netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen())
		}
		if p.Addr().Is4In6() {
			errs = append(errs, fmt.Errorf("allow-private %q: write IPv4-mapped ranges as IPv4", c))
			continue
		}
		if p != p.Masked() {
			errs = append(errs, fmt.Errorf("allow-private %q has host bits set; did you mean %s?", c, p.Masked()))
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// ParseUpstreamCA reads the certificates of pemText, which must hold at
// least one and nothing else: a private key pasted by mistake would be on
// the proxy's command line for anyone who can inspect it.
func ParseUpstreamCA(pemText string) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := []byte(pemText)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("holds a %q block; only certificates belong here (never a key)", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 || strings.TrimSpace(string(rest)) != "" {
		return nil, errors.New("must be PEM certificates (-----BEGIN CERTIFICATE-----) and nothing else")
	}
	return certs, nil
}

// UpstreamRoots is the system's roots plus the CAs in pemText, or nil
// (the system's) when pemText is "".
func UpstreamRoots(pemText string) (*x509.CertPool, error) {
	if strings.TrimSpace(pemText) == "" {
		return nil, nil
	}
	certs, err := ParseUpstreamCA(pemText)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}
