package redact

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

var testSecrets = []string{"sk-proj-Abc123XyZ789qwe", "ghp_0aZ9bY8cX7dW6eV5fU4", "hunter2-db-pass"}

func TestRedactorEncodedForms(t *testing.T) {
	r := NewRedactor(testSecrets...)
	for _, v := range testSecrets {
		for name, form := range testutil.Spellings(v) {
			in := "before " + form + " after"
			got := r.String(in)
			if want := "before " + Redacted + " after"; got != want {
				t.Errorf("%s of %q: got %q, want %q", name, v, got, want)
			}
		}
	}
}

// TestRedactorInsideBase64Blob: a value inside a larger base64 blob, at
// each byte offset, loses every character that it decides alone.
func TestRedactorInsideBase64Blob(t *testing.T) {
	r := NewRedactor(testSecrets...)
	for _, v := range testSecrets {
		for off := range 3 {
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
				prefix := strings.Repeat("\x07", 30+off)
				blob := enc.EncodeToString([]byte(prefix + v + "{\"more\":\"json\"}"))
				got := r.String(blob)
				inner := testutil.InnerBase64(blob, len(prefix), len(v))
				if !strings.Contains(got, Redacted) {
					t.Errorf("%q at offset %d: nothing redacted in %s", v, off, got)
					continue
				}
				// No four characters in a row of what v decides survive.
				for i := 0; i+4 <= len(inner); i++ {
					if strings.Contains(strings.ReplaceAll(got, Redacted, "\x00"), inner[i:i+4]) &&
						!strings.Contains(blob[:len(blob)-len(inner)], inner[i:i+4]) {
						t.Errorf("%q at offset %d: %q left in %s", v, off, inner[i:i+4], got)
						break
					}
				}
			}
		}
	}
}

// TestRedactorLeavesOrdinaryText: nothing but the values goes, however the
// text around them is written.
func TestRedactorLeavesOrdinaryText(t *testing.T) {
	r := NewRedactor(testSecrets...)
	rng := rand.New(rand.NewPCG(1, 2))
	blob := make([]byte, 1<<16)
	for i := range blob {
		blob[i] = byte(rng.Uint32())
	}
	for _, s := range []string{
		`{"choices":[{"message":{"content":"The key \u00e9 is \"fine\"\n\ttabs % 41 &#x; \\x"}}]}`,
		base64.StdEncoding.EncodeToString(blob),
		hex.EncodeToString(blob),
		"s k - p r o j - A b c 1 2 3", // a prefix of a value, spelled out
		"sk-proj-Abc123XyZ789qw",      // one character short
	} {
		if got := r.String(s); got != s {
			t.Errorf("ordinary text changed:\n in %.200q\nout %.200q", s, got)
		}
	}
}

func TestRedactorLongestFirstAndShortValues(t *testing.T) {
	r := NewRedactor("abcd", "abcdefgh", "xyz", "", `q"uote`)
	got := r.String(`abcdefgh abcd xyz q\"uote q"uote YWJjZA== dcba`)
	want := "[REDACTED] [REDACTED] xyz [REDACTED] [REDACTED] [REDACTED] [REDACTED]"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// Short values are not looked for spelled out: "a b c d" is prose.
	if s := "a b c d"; r.String(s) != s {
		t.Errorf("%q redacted to %q", s, r.String(s))
	}
}

// BenchmarkRedactor: a 1 MB tool output (log-like text with base64 and
// hex in it) and 10 secrets, two of them present.
func BenchmarkRedactor(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	var secrets []string
	for i := range 10 {
		secrets = append(secrets, fmt.Sprintf("sk-%d-%016x%016x", i, rng.Uint64(), rng.Uint64()))
	}
	var sb strings.Builder
	for sb.Len() < 1<<20 {
		raw := make([]byte, 48)
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		fmt.Fprintf(&sb, "2026-12-02T21:00:%02d level=info msg=\"request done\" id=%s body=%s\n",
			rng.IntN(60), hex.EncodeToString(raw[:8]), base64.StdEncoding.EncodeToString(raw))
	}
	text := sb.String()[:1<<20]
	text = text[:1000] + secrets[3] + text[1000:len(text)-2000] + base64.StdEncoding.EncodeToString([]byte(secrets[7])) + text[len(text)-2000:]
	r := NewRedactor(secrets...)
	if out := r.String(text); strings.Count(out, Redacted) < 1 {
		b.Fatalf("want a redaction, got %d", strings.Count(out, Redacted))
	}
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for range b.N {
		_ = r.String(text)
	}
}
