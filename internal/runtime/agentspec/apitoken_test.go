package agentspec

import (
	"strings"
	"testing"
	"time"
)

func TestShortToken(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	now := time.Unix(1_800_000_000, 0)
	good := MintShortToken(tok, "core", now.Add(time.Minute))
	if !IsShortToken(good) || IsShortToken(tok) {
		t.Fatalf("IsShortToken: %q", good)
	}
	if err := VerifyShortToken(tok, "core", good, now); err != nil {
		t.Fatalf("a fresh token: %v", err)
	}
	rest := strings.TrimPrefix(good, shortTokenPrefix)
	parts := strings.Split(rest, ".")
	for name, c := range map[string]struct {
		token, agent, presented string
		at                      time.Time
		want                    string
	}{
		"expired":          {tok, "core", good, now.Add(time.Minute), "expired"},
		"another agent":    {tok, "fetch", good, now, "for agent"},
		"renamed in place": {tok, "fetch", shortTokenPrefix + "fetch." + parts[1] + "." + parts[2], now, "does not verify"},
		"expiry moved":     {tok, "core", shortTokenPrefix + "core.1900000000." + parts[2], now, "does not verify"},
		"rotated token":    {strings.Repeat("f", 64), "core", good, now, "does not verify"},
		"too long":         {tok, "core", MintShortToken(tok, "core", now.Add(MaxShortTokenTTL+time.Minute)), now, "longer than"},
		"not hex":          {tok, "core", shortTokenPrefix + "core." + parts[1] + ".zz", now, "does not verify"},
		"no parts":         {tok, "core", shortTokenPrefix + "core", now, "not a short-lived token"},
		"bearer token":     {tok, "core", tok, now, "not a short-lived token"},
		"no bearer token":  {"", "core", MintShortToken("", "core", now.Add(time.Minute)), now, "no bearer token"},
	} {
		err := VerifyShortToken(c.token, c.agent, c.presented, c.at)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
