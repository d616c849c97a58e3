package topospec

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/probe"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

// VerifyOptions say what to probe. Targets left empty are not probed: the
// verification never invents a destination, so nothing is sent anywhere
// the operator did not name.
// VerifyOptions' defaults and bounds, also quoted by the verify data
// source's schema and docs.
const (
	DefaultVerifyHostPort       = 22
	DefaultVerifyTimeoutSeconds = 2
	MaxVerifyTimeoutSeconds     = 300
	// DefaultVerifyDNSName is the outside name every role must fail to
	// resolve when DNSName is not set: under .invalid (RFC 6761), so no
	// resolver anywhere has it, and it is asked only of the DNS sink.
	DefaultVerifyDNSName = "outside.meepa-verify.invalid"
)

type VerifyOptions struct {
	// Image runs the probes; it must contain /usr/local/bin/agent-runner.
	// Default: the proxy's image.
	Image string
	// AllowedTarget is a host:port the allowlist admits; FETCH must reach
	// it through the proxy. When its host is an IP literal, CORE and FETCH
	// also dial it directly and must fail: the firewall opens its port for
	// the proxy's egress only, and this row shows that opening is no wider.
	AllowedTarget string
	// DeniedTarget is a host:port the allowlist does not admit; the proxy
	// must refuse it.
	DeniedTarget string
	// OutsideAddress is an ip:port outside the topology; no member may
	// reach it directly.
	OutsideAddress string
	// HostPort is a port tried on each bridge gateway (the host). Any
	// answer, even a reset, means the host is reachable. Default
	// DefaultVerifyHostPort.
	HostPort int
	// DNSName is resolved in every role, which must fail; default
	// DefaultVerifyDNSName (the direct asks below need it set). The probes get their role's DNS settings (the
	// topology's DNS sink as the engine resolver's only upstream, see
	// Spec.DNSSink), so the query stays on llmnet whatever the engine; each
	// role also resolves its own probe container's name, which the engine
	// answers itself and which must resolve. When the proxy has DNS
	// servers, CORE and FETCH also ask the first of them for DNSName
	// directly, over UDP and TCP, which must fail: port 53 is open for the
	// proxy only.
	DNSName string
	// Timeout per check; default DefaultVerifyTimeoutSeconds.
	Timeout time.Duration
}

// AnyTarget is a destination to ask the proxy for when the answer does
// not depend on it (a request without a credential is refused before its
// destination is looked at): the first of AllowedTarget, DeniedTarget and
// OutsideAddress given.
func (o VerifyOptions) AnyTarget() string {
	for _, t := range []string{o.AllowedTarget, o.DeniedTarget, o.OutsideAddress} {
		if t != "" {
			return t
		}
	}
	return ""
}

// Expectations.
const (
	ExpectBlocked = "blocked"
	ExpectOpen    = "open"
	ExpectAllowed = "allowed"
	ExpectDenied  = "denied"
	ExpectNoDNS   = "not-resolved"
	ExpectDNS     = "resolved"
	// ExpectAuthRequired: the proxy asks for an egress credential (407).
	ExpectAuthRequired = "auth-required"
)

// Passes says whether an observation meets a row's expectation. On a
// cluster a NetworkPolicy may reject rather than drop: rejectBlocks counts
// a refused connection as blocked there.
func Passes(expected, observed string, rejectBlocks bool) bool {
	switch expected {
	case ExpectBlocked:
		return probe.Blocked(observed) || rejectBlocks && observed == probe.Refused
	case ExpectOpen:
		return observed == probe.Open
	case ExpectAllowed:
		return observed == probe.Allowed
	case ExpectDenied:
		return observed == probe.Denied
	case ExpectAuthRequired:
		return observed == probe.AuthRequired
	case ExpectNoDNS:
		return observed == probe.NotResolved
	case ExpectDNS:
		return observed == probe.Resolved
	}
	return false
}

// Probe is one row of the verification table.
type Probe struct {
	Role     string `json:"role"`
	What     string `json:"what"`
	Check    string `json:"check"`
	Expected string `json:"expected"`
	Observed string `json:"observed"`
	Detail   string `json:"detail"`
	Pass     bool   `json:"pass"`
}

// Report is the verification outcome.
type Report struct {
	Probes     []Probe
	Violations []string // containers attached in a way the spec forbids
}

// OK reports whether every probe matched the spec and no attachment
// violates it.
func (r Report) OK() bool {
	for _, p := range r.Probes {
		if !p.Pass {
			return false
		}
	}
	return len(r.Violations) == 0
}

// Table renders the report for people.
func (r Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-17s %-27s %-12s %-12s %s\n", "ROLE", "WHAT", "EXPECTED", "OBSERVED", "PASS")
	for _, p := range r.Probes {
		fmt.Fprintf(&b, "%-17s %-27s %-12s %-12s %t\n", p.Role, p.What, p.Expected, p.Observed, p.Pass)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "VIOLATION: %s\n", v)
	}
	return b.String()
}

// WithDefaults fills what o leaves out: the proxy's image for the probes,
// DefaultVerifyHostPort, DefaultVerifyTimeoutSeconds and
// DefaultVerifyDNSName. named says whether the operator named DNSName
// (only then are the proxy's own DNS servers asked directly).
func (o VerifyOptions) WithDefaults(s Spec) (out VerifyOptions, named bool) {
	named = o.DNSName != ""
	if o.Image == "" {
		o.Image = s.Proxy.Image
	}
	if o.HostPort == 0 {
		o.HostPort = DefaultVerifyHostPort
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultVerifyTimeoutSeconds * time.Second
	}
	if o.DNSName == "" {
		o.DNSName = DefaultVerifyDNSName
	}
	return o, named
}

// ProbeRows are one probe's rows of the report and the checks that fill them,
// in the same order.
type ProbeRows struct {
	Role   string
	Rows   []Probe
	Checks []probe.Check
}

// Add appends a row and its check.
func (r *ProbeRows) Add(what, expected string, c probe.Check) {
	r.Rows = append(r.Rows, Probe{Role: r.Role, What: what, Check: c.String(), Expected: expected})
	r.Checks = append(r.Checks, c)
}

// ProbeAgent is the agent name of the credential a verification mints
// for its FETCH probe.
const ProbeAgent = "threegate-verify"

// ProbeCredential is the Proxy-Authorization (probe.EnvProxyAuthorization)
// of a verification's FETCH probe: a credential of its own (ProbeAgent,
// the topology's whole list), derived from the topology's egress key and
// live for the probe's run only (timeout is the probe's per check).
func ProbeCredential(key []byte, timeout time.Duration) (string, error) {
	cred, err := proxy.Mint(proxy.AgentKey(key, ProbeAgent), proxy.Claims{Agent: ProbeAgent, Role: RoleFetch,
		Message: fmt.Sprintf("verify-%d", time.Now().UnixNano()), Expiry: time.Now().Add(2*time.Minute + 4*timeout).Unix()})
	if err != nil {
		return "", err
	}
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(ProbeAgent+":"+cred)), nil
}
