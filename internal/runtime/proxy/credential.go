package proxy

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
)

// Per-message egress credentials.
//
// A topology's proxy holds a secret key K (KeySize random bytes, never
// given to a sandbox). An agent's runner holds only its derived key
// K_a = AgentKey(K, agent), so it cannot mint for another agent. Per
// message it mints a Credential: the claims (agent, role, message id,
// expiry, the agent's narrowed Policy) as base64url JSON, a dot, and their
// HMAC-SHA256 under K_a. The proxy verifies it with no state: it derives
// K_a from the claimed agent and compares the MAC. The sandbox presents it
// as the password of the http_proxy URL's userinfo, which clients send as
// "Proxy-Authorization: Basic" on CONNECT and forward requests alike.
//
// A credential ends at its expiry (the message's timeout, as a backstop)
// or when the runner revokes it at the message's end (RevokePath): the
// proxy keeps revoked message ids until they would have expired anyway,
// so that list is bounded by the expiry. Revoking needs only the
// credential itself: it can only take rights away, and only from the one
// message whose credential the caller holds.

// KeySize is the length of a topology's egress key.
const KeySize = 32

// EnvEgressKey carries the topology's key (hex) to `agent-runner proxy
// --require-credential`: the proxy's environment, not its argv, which the
// topology's record and config hash are made from.
const EnvEgressKey = "MEEPA_EGRESS_KEY"

// RevokePath is where a runner revokes a credential it minted: a POST to
// the proxy itself (origin form), authorized by that credential. The
// answer is the message's egress Counts as JSON.
const RevokePath = "/meepa/egress/revoke"

// NewKey makes a topology's egress key.
func NewKey() ([]byte, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("egress key: %w", err)
	}
	return k, nil
}

// ParseKey reads a hex key of KeySize bytes.
func ParseKey(s string) ([]byte, error) {
	k, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(k) != KeySize {
		return nil, fmt.Errorf("egress key: want %d bytes of hex", KeySize)
	}
	return k, nil
}

// AgentKey derives agent's key from the topology's key K.
func AgentKey(k []byte, agent string) []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("meepa-egress-agent\x00" + agent))
	return m.Sum(nil)
}

// Policy is an agent's own egress policy, inside its topology's allow
// list (the ceiling, which the proxy always applies too):
//   - Allow, when not empty, replaces the topology's list for this agent;
//     each entry must be covered by an entry of the ceiling (Narrows);
//   - Deny refuses matching targets even where an allow matches;
//   - CIDRs, when not empty, confine every connection to addresses in
//     these public ranges (a name is dialed only at its addresses inside
//     them, an IP literal only when inside them).
//
// Each part can only take away from what the topology allows.
type Policy struct {
	Allow Allowlist      `json:"allow,omitempty"`
	Deny  Allowlist      `json:"deny,omitempty"`
	CIDRs []netip.Prefix `json:"cidrs,omitempty"`
}

// refuses says why the policy refuses t (which the ceiling allowed), or "".
func (p Policy) refuses(t Target) string {
	if len(p.Allow) > 0 {
		if _, ok := p.Allow.Match(t); !ok {
			return "not in the agent's allow list"
		}
	}
	if d, ok := p.Deny.Match(t); ok {
		return "denied by the agent's deny entry " + d.String()
	}
	return ""
}

// IsZero reports a policy that narrows nothing.
func (p Policy) IsZero() bool { return len(p.Allow) == 0 && len(p.Deny) == 0 && len(p.CIDRs) == 0 }

// Claims are what a credential says.
type Claims struct {
	Agent   string `json:"a"`
	Role    string `json:"r"`
	Message string `json:"m"`
	Expiry  int64  `json:"e"` // Unix seconds
	Policy  Policy `json:"p,omitzero"`
}

// Mint signs claims with the agent's key and returns the credential.
func Mint(agentKey []byte, c Claims) (string, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("egress credential: %w", err)
	}
	enc := base64.RawURLEncoding.EncodeToString(body)
	m := hmac.New(sha256.New, agentKey)
	m.Write([]byte(enc))
	return enc + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil)), nil
}

// ProxyURLWith puts the credential into a proxy URL's userinfo
// ("http://<agent>:<credential>@host:port"), the form http_proxy and
// https_proxy carry.
func ProxyURLWith(proxyURL, agent, credential string) (string, error) {
	u, err := url.Parse(proxyURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("proxy URL %q: not a URL", proxyURL)
	}
	u.User = url.UserPassword(agent, credential)
	return u.String(), nil
}

// Credential errors; a request that carries one of them gets a 407.
var (
	ErrNoCredential      = errors.New("no egress credential (Proxy-Authorization)")
	ErrBadCredential     = errors.New("egress credential not valid")
	ErrExpiredCredential = errors.New("egress credential expired")
	ErrRevokedCredential = errors.New("egress credential revoked: its message has ended")
)

// verifier checks credentials against the topology's key.
type verifier struct {
	key []byte
	now func() time.Time

	mu      sync.Mutex
	agents  map[string][]byte     // derived keys, bounded by maxAgentKeys
	checked map[string]Claims     // credentials whose MAC held, bounded by maxChecked
	revoked map[string]*msgCounts // by agent+"\x00"+message, until expiry
	live    map[string]*msgCounts // counts of messages seen, until expiry
}

const (
	maxAgentKeys = 4096
	maxChecked   = 4096
)

// msgCounts are one message's egress requests, as the proxy saw them.
type msgCounts struct {
	expiry int64
	Counts
}

// Counts are a message's egress requests: every request that carried its
// valid credential, and of those the ones the policy refused.
type Counts struct {
	Requests int `json:"requests"`
	Refused  int `json:"refused"`
}

func newVerifier(key []byte) *verifier {
	return &verifier{key: key, now: time.Now, agents: map[string][]byte{}, checked: map[string]Claims{},
		revoked: map[string]*msgCounts{}, live: map[string]*msgCounts{}}
}

// credentialOf reads the credential from a Proxy-Authorization header
// ("Basic base64(agent:credential)").
func credentialOf(h http.Header) (user, cred string, err error) {
	v := h.Get("Proxy-Authorization")
	if v == "" {
		return "", "", ErrNoCredential
	}
	scheme, b64, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", "", ErrBadCredential
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return "", "", ErrBadCredential
	}
	user, cred, ok = strings.Cut(string(raw), ":")
	if !ok {
		return "", "", ErrBadCredential
	}
	return user, cred, nil
}

// verify checks a credential: MAC, expiry, revocation, and that the user
// name is the agent it was minted for.
func (v *verifier) verify(user, cred string) (Claims, error) {
	v.mu.Lock()
	c, hit := v.checked[cred]
	v.mu.Unlock()
	if !hit {
		var err error
		if c, err = v.check(cred); err != nil {
			return Claims{}, err
		}
		v.mu.Lock()
		if len(v.checked) >= maxChecked {
			clear(v.checked)
		}
		v.checked[cred] = c
		v.mu.Unlock()
	}
	if c.Agent != user {
		return Claims{}, ErrBadCredential
	}
	now := v.now().Unix()
	if now >= c.Expiry {
		return c, ErrExpiredCredential
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.sweep(now)
	if _, gone := v.revoked[msgKey(c)]; gone {
		return c, ErrRevokedCredential
	}
	return c, nil
}

// check verifies a credential's MAC and reads its claims.
func (v *verifier) check(cred string) (Claims, error) {
	enc, sig, ok := strings.Cut(cred, ".")
	if !ok || len(enc) > 16<<10 {
		return Claims{}, ErrBadCredential
	}
	body, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return Claims{}, ErrBadCredential
	}
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return Claims{}, ErrBadCredential
	}
	// The agent is read before the MAC is checked only to pick the key;
	// nothing else of the claims is used until the MAC holds.
	var peek struct {
		Agent string `json:"a"`
	}
	if json.Unmarshal(body, &peek) != nil || peek.Agent == "" {
		return Claims{}, ErrBadCredential
	}
	m := hmac.New(sha256.New, v.agentKey(peek.Agent))
	m.Write([]byte(enc))
	if !hmac.Equal(mac, m.Sum(nil)) {
		return Claims{}, ErrBadCredential
	}
	var c Claims
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if dec.Decode(&c) != nil || c.Message == "" || c.Agent != peek.Agent {
		return Claims{}, ErrBadCredential
	}
	return c, nil
}

func (v *verifier) agentKey(agent string) []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	if k, ok := v.agents[agent]; ok {
		return k
	}
	if len(v.agents) >= maxAgentKeys {
		clear(v.agents)
	}
	k := AgentKey(v.key, agent)
	v.agents[agent] = k
	return k
}

func msgKey(c Claims) string { return c.Agent + "\x00" + c.Message }

// count records one request of a live message; refused says the policy
// refused it.
func (v *verifier) count(c Claims, refused bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	mc := v.live[msgKey(c)]
	if mc == nil {
		mc = &msgCounts{expiry: c.Expiry}
		v.live[msgKey(c)] = mc
	}
	mc.Requests++
	if refused {
		mc.Refused++
	}
}

// revoke ends a message's credential and returns its counts. Revoking
// twice returns the same counts.
func (v *verifier) revoke(c Claims) Counts {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := msgKey(c)
	if mc, ok := v.revoked[k]; ok {
		return mc.Counts
	}
	mc := v.live[k]
	if mc == nil {
		mc = &msgCounts{expiry: c.Expiry}
	}
	delete(v.live, k)
	v.revoked[k] = mc
	return mc.Counts
}

// sweep drops what has expired: an expired credential is refused by its
// expiry alone. Caller holds mu.
func (v *verifier) sweep(now int64) {
	for k, mc := range v.revoked {
		if now >= mc.expiry {
			delete(v.revoked, k)
		}
	}
	for k, mc := range v.live {
		if now >= mc.expiry {
			delete(v.live, k)
		}
	}
}

// Narrows checks that p takes nothing beyond ceiling, the topology's allow
// list: every Allow entry is covered by one of the ceiling's, and every
// CIDR is public or inside the topology's private exemptions (a CIDR only
// confines, so any would be safe; one that the topology refuses anyway
// would only be a mistake). It returns one error per offending entry,
// at its index in the agent's list ("egress.allow[1]").
func Narrows(ceiling Allowlist, private []netip.Prefix, p Policy) fault.List {
	const widens = "Egress Widens The Topology"
	var errs fault.List
	for i, a := range p.Allow {
		if !ceiling.Covers(a) {
			errs.Add("egress.allow", i, widens, "%s is not inside the topology's allow list (%s); an agent can only narrow it",
				a, strings.Join(ceiling.Strings(), ", "))
		}
	}
	for i, c := range p.CIDRs {
		if why := publicPrefix(c); why != "" && !insideAny(private, c) {
			errs.Add("egress.allow_cidrs", i, widens, "%s %s; an agent's ranges are public ones, or inside the topology's allow_private", c, why)
		}
	}
	return errs
}

// Covers says whether some pattern of the list allows everything a does.
func (l Allowlist) Covers(a Pattern) bool {
	for _, c := range l {
		if c.Port != a.Port {
			continue
		}
		switch {
		case c.IP.IsValid() || a.IP.IsValid():
			if c.IP == a.IP {
				return true
			}
		case !c.Wildcard:
			if !a.Wildcard && a.Host == c.Host {
				return true
			}
		case a.Host == c.Host:
			if a.Wildcard {
				return true
			}
		case strings.HasSuffix(a.Host, "."+c.Host):
			return true
		}
	}
	return false
}

// publicPrefix says why p is not a public range, or "".
func publicPrefix(p netip.Prefix) string {
	if !p.IsValid() || p != p.Masked() {
		return "is not a CIDR without host bits"
	}
	for _, r := range specialRanges {
		if r.prefix.Overlaps(p) {
			return "overlaps " + r.reason
		}
	}
	if p.Addr().Is6() && !netip.MustParsePrefix("2000::/3").Contains(p.Addr()) {
		return "is outside 2000::/3"
	}
	return ""
}

// PrefixInside says whether p lies inside one of list.
func PrefixInside(list []netip.Prefix, p netip.Prefix) bool { return insideAny(list, p) }

func insideAny(list []netip.Prefix, p netip.Prefix) bool {
	for _, q := range list {
		if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// ParsePolicy parses an agent's policy from its three lists, reporting
// every bad entry at its index in its list ("egress.deny[0]").
func ParsePolicy(allow, deny, cidrs []string) (Policy, fault.List) {
	const invalid = "Invalid Egress Entry"
	var p Policy
	var errs fault.List
	one := func(field string, entries []string) Allowlist {
		var list Allowlist
		for i, e := range entries {
			pat, err := ParsePattern(e)
			if err != nil {
				errs = append(errs, &fault.FieldError{Field: field, Index: i, Summary: invalid, Err: err})
				continue
			}
			list = append(list, pat)
		}
		return list
	}
	p.Allow, p.Deny = one("egress.allow", allow), one("egress.deny", deny)
	for i, c := range cidrs {
		pre, err := netip.ParsePrefix(c)
		if err != nil {
			errs.Add("egress.allow_cidrs", i, invalid, "%q is not a CIDR (e.g. 8.8.8.0/24)", c)
			continue
		}
		p.CIDRs = append(p.CIDRs, pre)
	}
	return p, errs
}
