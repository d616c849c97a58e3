package agentspec

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"net/url"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

// Egress is how a FETCH agent's runner gives each message its own egress
// identity: with Key, the agent's key derived from its topology's
// (proxy.AgentKey), it mints one credential per message (proxy.Mint),
// puts it in the message's http_proxy / https_proxy userinfo, and revokes
// it at Proxy when the message ends. Key and Proxy are written at apply
// from the live topology; Policy is the owner's (threegate.egress),
// checked at plan and at apply against the topology's allow list.
type Egress struct {
	// Key is the agent's derived key, hex; it is as secret as the token
	// and never enters a sandbox.
	Key string `json:"key"`
	// Proxy is the topology's proxy URL, without userinfo.
	Proxy  string       `json:"proxy"`
	Policy proxy.Policy `json:"policy,omitzero"`
}

// validateEgress checks the egress block of a runner's config.
func validateEgress(c *Config) error {
	e := c.Egress
	if e == nil {
		return nil
	}
	var errs []error
	if c.Role != RoleFetch {
		errs = append(errs, fmt.Errorf("egress: only a fetch agent reaches the proxy, and this one's role is %q", c.Role))
	}
	if _, err := proxy.ParseKey(e.Key); err != nil {
		errs = append(errs, fmt.Errorf("egress.key: %w", err))
	}
	if u, err := url.Parse(e.Proxy); err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil {
		errs = append(errs, fmt.Errorf("egress.proxy %q: want http://host:port, without userinfo", e.Proxy))
	}
	return errors.Join(errs...)
}

// WithoutApplied is the egress block with what apply resolves (the key,
// the proxy) cleared: what a plan knows of it (nil without a policy, as a
// plan without the egress attribute has).
func (e *Egress) WithoutApplied() *Egress {
	if e == nil || e.Policy.IsZero() {
		return nil
	}
	return &Egress{Policy: e.Policy}
}

// EgressTopology is what a FETCH agent's apply reads of its live
// topology: the allow list and private ranges its policy must stay
// inside, the topology's egress key and the proxy's URL.
type EgressTopology struct {
	Allow        proxy.Allowlist
	AllowPrivate []netip.Prefix
	Key          []byte
	Proxy        string
}

// EgressFor is a FETCH agent's egress block, on every backend: its key
// derived from the topology's, the proxy URL, and the owner's policy
// (c.Egress, planned), checked once more against the live topology (the
// plan checked it against the planned one), with the hosts its secrets
// are bound to. live reads the topology; it is called for a FETCH agent
// only. Other roles reach no proxy and get none.
func EgressFor(c *Config, live func() (EgressTopology, error)) (*Egress, error) {
	planned := c.Egress
	if c.Role != RoleFetch {
		if planned != nil && !planned.Policy.IsZero() {
			return nil, fmt.Errorf("egress: only a fetch agent has an egress policy; this one's role is %s", c.Role)
		}
		return nil, nil
	}
	var policy proxy.Policy
	if planned != nil {
		policy = planned.Policy
	}
	t, err := live()
	if err != nil {
		return nil, err
	}
	errs := proxy.Narrows(t.Allow, t.AllowPrivate, policy)
	errs = append(errs, CheckBoundHosts(c.SecretBindings, t.Allow, policy)...)
	if len(errs) > 0 {
		return nil, errs.Err()
	}
	agentID := c.AgentID
	return &Egress{Key: hex.EncodeToString(proxy.AgentKey(t.Key, agentID)), Proxy: t.Proxy, Policy: policy}, nil
}
