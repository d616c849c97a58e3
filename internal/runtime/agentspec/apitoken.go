package agentspec

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A short-lived API token stands in for an agent's bearer token for a
// while: "mst1.<agent_id>.<unix expiry>.<hex MAC>". The MAC is keyed by a
// key derived from the agent's bearer token, so only whoever holds that
// token can make one, the runner checks one with nothing but its config,
// and a new token (token_version) ends every short-lived one made from
// the old.
const (
	shortTokenPrefix = "mst1."
	// MaxShortTokenTTL is the longest a short-lived token may run; the
	// runner refuses one that expires later than this from its own now.
	MaxShortTokenTTL = 24 * time.Hour
	// DefaultShortTokenTTL is the ephemeral resource's default lifetime.
	DefaultShortTokenTTL = 15 * time.Minute
)

// IsShortToken says whether a presented bearer value has the short-lived
// form (it may still be forged or expired).
func IsShortToken(presented string) bool { return strings.HasPrefix(presented, shortTokenPrefix) }

// MintShortToken makes agentID's short-lived token from its bearer token,
// good until exp.
func MintShortToken(token, agentID string, exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	return shortTokenPrefix + agentID + "." + e + "." + hex.EncodeToString(shortTokenMAC(token, agentID, e))
}

// NewShortToken is MintShortToken for ttl from now (1 s to
// MaxShortTokenTTL), and its expiry.
func NewShortToken(token, agentID string, ttl time.Duration) (string, time.Time, error) {
	if ttl < time.Second || ttl > MaxShortTokenTTL {
		return "", time.Time{}, fmt.Errorf("a short-lived token lives 1 s to %s, not %s", MaxShortTokenTTL, ttl)
	}
	if len(token) < 32 {
		return "", time.Time{}, errors.New("the runner's config holds no bearer token")
	}
	exp := time.Now().Add(ttl).Truncate(time.Second)
	return MintShortToken(token, agentID, exp), exp, nil
}

// VerifyShortToken checks presented against agentID's bearer token at
// now: its MAC, its agent and its expiry (past, or later than
// MaxShortTokenTTL from now, are both refused).
func VerifyShortToken(token, agentID, presented string, now time.Time) error {
	if len(token) < 32 {
		return errors.New("no bearer token to check a short-lived one against")
	}
	rest, ok := strings.CutPrefix(presented, shortTokenPrefix)
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 {
		return errors.New("not a short-lived token")
	}
	mac, err := hex.DecodeString(parts[2])
	if err != nil || !hmac.Equal(mac, shortTokenMAC(token, parts[0], parts[1])) {
		return errors.New("short-lived token does not verify")
	}
	if parts[0] != agentID {
		return fmt.Errorf("short-lived token is for agent %q", parts[0])
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return errors.New("short-lived token has no expiry")
	}
	switch at := time.Unix(exp, 0); {
	case !now.Before(at):
		return errors.New("short-lived token expired")
	case at.Sub(now) > MaxShortTokenTTL:
		return fmt.Errorf("short-lived token runs longer than %s", MaxShortTokenTTL)
	}
	return nil
}

func shortTokenMAC(token, agentID, exp string) []byte {
	k := hmac.New(sha256.New, []byte(token))
	k.Write([]byte("meepa short-lived API token key v1"))
	m := hmac.New(sha256.New, k.Sum(nil))
	m.Write([]byte(agentID + "\x00" + exp))
	return m.Sum(nil)
}
