package agentspec

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

// Brokered secrets.
//
// A secret named in SecretBindings never enters a sandbox. Each message's
// tools get a placeholder in its place (the variable of the secret's
// name, and the fetch tool's header for a bound host), unique to the
// agent and the message. The runner registers placeholder, value and
// binding with the egress proxy under the message's credential; for a
// bound host the proxy terminates the tool's TLS with the agent's CA,
// puts the value where the binding says, and forwards over TLS it
// verifies against the real host. Anywhere else the placeholder is
// worth nothing. A secret that is not bound reaches no sandbox at all:
// the runner keeps it for redaction only.

// Brokers: who turns a bound secret's placeholder into its value.
const (
	// BrokerTopology is a FETCH agent's: its topology's egress proxy.
	BrokerTopology = "topology"
	// BrokerRunner is the runner's own broker: on its loopback for a
	// host-mode agent, whose tools share the runner's network, and on a
	// unix socket beside the relay's for a network = "bridge" container.
	BrokerRunner = "runner"
)

// EgressSocketName is the runner broker's socket in the relay directory,
// for a bridge container's tools (agent-run pipes a loopback port to it).
const EgressSocketName = "egress.sock"

// BrokersInContainer says whether c's bound secrets go through the
// runner's broker from per-message containers on the managed bridge.
func BrokersInContainer(c *Config) bool {
	b, _ := BrokerOf(c)
	return b == BrokerRunner && c.Container.Enabled && len(c.SecretBindings) > 0
}

// BrokerOf says which broker serves c's bound secrets, or, when none
// can, why ("" broker).
func BrokerOf(c *Config) (broker, why string) {
	switch {
	case c.Role == RoleFetch:
		return BrokerTopology, ""
	case c.Role != "":
		return "", fmt.Sprintf("a %s agent has no way out to send a secret on: only a fetch agent reaches its topology's egress proxy", c.Role)
	case c.Container.Enabled && c.Container.Network == "bridge" && c.Kubernetes == nil:
		return BrokerRunner, ""
	case c.Container.Enabled:
		return "", fmt.Sprintf("a per-message container with network = %q has no way out to send a secret on: bind it on a fetch "+
			"agent of a threegate_network, on a network = \"bridge\" agent, or on a host-mode agent with file_access.allow_network", orNone(c.Container.Network))
	case c.FileAccess.Unrestricted:
		return "", "with file_access.unrestricted the tools can read the runner's config, and every secret in it: nothing could keep a bound one from them"
	case !c.FileAccess.AllowNetwork:
		return "", "file_access.allow_network is false, so the tools have no network to send a secret on"
	}
	return BrokerRunner, ""
}

func orNone(network string) string {
	if network == "" {
		return "none"
	}
	return network
}

// DefaultSecretHeader is the header a binding without one puts its
// secret in.
const DefaultSecretHeader = "Authorization"

// SecretBinding says where a secret may be sent: to Hosts only (proxy
// allowlist patterns), in header Header, either as the header's value
// with the placeholder replaced (Scheme, when set, is what the fetch tool
// writes before it: "Bearer", "token"), or, with BasicUser, as the
// password of HTTP basic authentication for that user.
type SecretBinding struct {
	Hosts     []string `json:"hosts"`
	Header    string   `json:"header,omitempty"`
	Scheme    string   `json:"scheme,omitempty"`
	BasicUser string   `json:"basic_user,omitempty"`
}

// HeaderOrDefault is the binding's header.
func (b SecretBinding) HeaderOrDefault() string {
	if b.Header == "" {
		return DefaultSecretHeader
	}
	return b.Header
}

// tokenRe is an HTTP token (RFC 9110 5.6.2): a header name or an auth
// scheme.
var tokenRe = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")

// unbindableHeaders are headers the proxy or the HTTP framing owns.
var unbindableHeaders = []string{"Host", "Proxy-Authorization", "Proxy-Authenticate", "Connection", "Content-Length",
	"Transfer-Encoding", "Te", "Trailer", "Upgrade", "Keep-Alive", "Proxy-Connection", "Accept-Encoding"}

// CheckSecretBindings checks bindings against the agent's broker (BrokerOf
// c) and the names of its secrets (nil names: not known, as in a plan whose secrets
// are unknown), the same at plan and in the runner's config. Each error
// is on the binding's map key.
func CheckSecretBindings(bindings map[string]SecretBinding, secrets []string, c *Config) fault.List {
	const invalid = "Invalid Secret Binding"
	var errs fault.List
	add := func(k, format string, args ...any) {
		errs = append(errs, &fault.FieldError{Field: "secret_bindings", Index: -1, Key: k, Summary: invalid, Err: fmt.Errorf(format, args...)})
	}
	_, noBroker := BrokerOf(c)
	for _, k := range slices.Sorted(maps.Keys(bindings)) {
		b := bindings[k]
		if noBroker != "" {
			add(k, "no broker could add this secret: %s", noBroker)
			continue
		}
		if err := CheckToolEnvName(k); err != nil {
			add(k, "the tools see the placeholder in the variable of the secret's name: %v", err)
		}
		if secrets != nil && !slices.Contains(secrets, k) {
			add(k, "no secret %q in secrets to bind", k)
		}
		if len(b.Hosts) == 0 {
			add(k, "hosts is empty: name the hosts the secret may be sent to")
		}
		for i, h := range b.Hosts {
			if _, err := proxy.ParsePattern(h); err != nil {
				add(k, "hosts[%d]: %v", i, err)
			}
		}
		h := b.HeaderOrDefault()
		switch {
		case !tokenRe.MatchString(h):
			add(k, "header %q is not a header name", h)
		case slices.ContainsFunc(unbindableHeaders, func(u string) bool { return strings.EqualFold(u, h) }):
			add(k, "header %q belongs to the proxy or to the HTTP framing, not to a credential", h)
		}
		if b.Scheme != "" && !tokenRe.MatchString(b.Scheme) {
			add(k, "scheme %q is not an authentication scheme (a token such as Bearer)", b.Scheme)
		}
		if b.BasicUser != "" {
			switch {
			case !strings.EqualFold(h, DefaultSecretHeader):
				add(k, "basic_user sends the secret as basic authentication, which is the Authorization header, not %q", h)
			case b.Scheme != "":
				add(k, "basic_user and scheme both say how the secret is written; set one")
			case strings.ContainsAny(b.BasicUser, ":\r\n\x00"):
				add(k, "basic_user %q: a user name without ':' or control characters", b.BasicUser)
			}
		}
	}
	return errs
}

// CheckBoundHosts refuses a bound host the agent can never reach: one
// outside its own allow list (when it has one) or its topology's.
func CheckBoundHosts(bindings map[string]SecretBinding, ceiling proxy.Allowlist, policy proxy.Policy) fault.List {
	var errs fault.List
	for _, k := range slices.Sorted(maps.Keys(bindings)) {
		for i, h := range bindings[k].Hosts {
			p, err := proxy.ParsePattern(h)
			if err != nil {
				continue // CheckSecretBindings says so
			}
			limit, whose := ceiling, "the topology's"
			if len(policy.Allow) > 0 {
				limit, whose = policy.Allow, "the agent's egress"
			}
			if !limit.Covers(p) {
				errs = append(errs, &fault.FieldError{Field: "secret_bindings", Index: -1, Key: k, Summary: "Secret Bound To An Unreachable Host",
					Err: fmt.Errorf("hosts[%d]: %s is not inside %s allow list (%s), so the secret could never be sent there", i, p, whose, strings.Join(limit.Strings(), ", "))})
			}
		}
	}
	return errs
}

// BoundSecretNames are the names of the bound secrets, sorted.
func BoundSecretNames(c *Config) []string { return slices.Sorted(maps.Keys(c.SecretBindings)) }
