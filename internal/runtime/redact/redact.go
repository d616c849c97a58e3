// Package redact replaces known secret values, and the usual ways a tool
// can spell them, with Redacted. It is its own package, with nothing but
// the standard library under it, because both sides need it: the runner
// and the agent loop scrub what leaves a sandbox, and the runner's config
// check (agentspec.Validate), which the provider runs at plan, refuses a
// secret in env with it.
package redact

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash/maphash"
	"slices"
	"sort"
	"strings"
)

// Redacted replaces every known secret value.
const Redacted = "[REDACTED]"

// MinSecretLen: shorter values would shred ordinary text ("a", "yes") and
// carry almost no secret to protect.
const MinSecretLen = 4

// minSpelledLen is how many letters and digits a value (or one of its
// encodings) needs before it is also looked for spelled out, with
// separators or escapes between its characters: a shorter run matches
// ordinary text too often ("a b c d"). Shorter values are replaced only as
// they are written.
const minSpelledLen = 8

// Redactor replaces known secret values, and the usual ways a tool can
// print them, with Redacted. What it catches:
//
//   - the value, reversed, in hex (either case) and in base32 (either
//     case), matched on their letters and digits alone, so any separator
//     or none between the characters ("s k - 1", "s,k,-,1", a line break
//     every 76 characters) is the same spelling;
//   - base64, standard or URL-safe, padded or raw (the alphabets differ
//     only in characters that are not letters or digits), also where the
//     value sits at any byte offset inside a larger encoded blob: the
//     characters that depend on the value alone are matched, the one or
//     two at each end that mix in the neighbouring bytes are not;
//   - characters escaped as JSON (\u0073), C (\x73), URL (%73) or HTML
//     (&#115; &#x73;), wholly or partly, in any of the spellings above:
//     the text is matched as if each escape were its character.
//
// What it cannot catch: a value split across two outputs (each half is
// ordinary text), or put through any other transformation (compressed,
// encrypted, rot13, every other character, a nested encoding such as hex
// of base64). That is why secrets do not reach tools unless asked
// (inject_secrets_env): redaction is the second line, not the first.
//
// Values shorter than minSpelledLen letters and digits are replaced only
// as written, JSON-escaped, reversed, in hex and in base64.
type Redactor struct {
	// exact are the short values' spellings, longest first.
	exact []string
	// pats are the spellable forms as matchText sees them: letters and
	// digits only; lower case when fold.
	pats []pattern
	// first maps the lower-cased first eight bytes of a pattern to the
	// patterns that start with them; filter is a 65536-bit summary of
	// first's keys that most positions of a text fail at once.
	//
	// The relay runs a Redactor on texts a hostile caller chooses
	// (runner's serveScrub), so how long a text takes must not say how
	// much of it is a key: filter's bits come from a hash keyed with seed,
	// a random secret of this Redactor, so which texts take the slower
	// path says nothing about the key short of its first eight characters
	// whole; and a candidate is compared over its whole length (matches).
	first  map[uint64][]int32
	filter *[1 << 10]uint64
	seed   maphash.Seed
}

type pattern struct {
	s    string
	fold bool
}

// NewRedactor knows each value of at least MinSecretLen bytes in every
// form the Redactor doc lists.
func NewRedactor(values ...string) *Redactor {
	r := &Redactor{first: map[uint64][]int32{}, filter: new([1 << 10]uint64), seed: maphash.MakeSeed()}
	seenExact, seenPat := map[string]bool{}, map[pattern]bool{}
	addExact := func(s string) {
		if len(s) >= MinSecretLen && !seenExact[s] {
			seenExact[s] = true
			r.exact = append(r.exact, s)
		}
	}
	addPat := func(form string, fold bool) {
		p := pattern{s: string(matchText(form).b), fold: fold}
		if fold {
			p.s = strings.ToLower(p.s)
		}
		if len(p.s) < minSpelledLen || seenPat[p] {
			return
		}
		seenPat[p] = true
		k := binary.LittleEndian.Uint64([]byte(p.s)) | foldBits
		r.first[k] = append(r.first[k], int32(len(r.pats)))
		h := r.filterBit(k)
		r.filter[h/64] |= 1 << (h % 64)
		r.pats = append(r.pats, p)
	}
	for _, v := range values {
		if len(v) < MinSecretLen {
			continue
		}
		rev := reverse(v)
		if len(matchText(v).b) < minSpelledLen {
			for _, s := range []string{v, jsonEscaped(v), rev, hex.EncodeToString([]byte(v)), strings.ToUpper(hex.EncodeToString([]byte(v))),
				base64.StdEncoding.EncodeToString([]byte(v)), base64.URLEncoding.EncodeToString([]byte(v)),
				base64.RawStdEncoding.EncodeToString([]byte(v)), base64.RawURLEncoding.EncodeToString([]byte(v))} {
				addExact(s)
			}
			continue
		}
		addPat(v, true)
		addPat(rev, true)
		addPat(hex.EncodeToString([]byte(v)), true)
		// Alone, the last character is v's too (the padding bits are zero).
		addPat(base64.RawStdEncoding.EncodeToString([]byte(v)), false)
		addPat(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte(v)), true)
		for off := range 3 {
			addPat(inner(base64.RawStdEncoding.EncodeToString, 6, off, v), false)
		}
		for off := range 5 {
			addPat(inner(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString, 5, off, v), true)
		}
	}
	sort.Slice(r.exact, func(i, j int) bool { return len(r.exact[i]) > len(r.exact[j]) })
	return r
}

// foldBits lower-cases eight letters or digits at once (a digit already
// has the bit).
const foldBits = 0x2020202020202020

func (r *Redactor) filterBit(k uint64) uint64 { return maphash.Comparable(r.seed, k) >> 48 }

func jsonEscaped(v string) string {
	b, _ := json.Marshal(v) // a string always marshals
	return string(b[1 : len(b)-1])
}

func reverse(v string) string {
	r := []rune(v)
	slices.Reverse(r)
	return string(r)
}

// inner is the part of v's encoding (bits bits per character) that depends
// on v alone when v starts off bytes into a larger encoded blob: the
// characters that also hold bits of the bytes before or after are cut.
func inner(enc func([]byte) string, bits, off int, v string) string {
	s := enc(append(make([]byte, off), v...))
	skip := (8*off + bits - 1) / bits
	keep := 8 * (off + len(v)) / bits
	if keep > len(s) {
		keep = len(s)
	}
	if skip >= keep {
		return ""
	}
	return s[skip:keep]
}

// String returns s with every known secret value replaced.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	if len(r.pats) > 0 {
		s = r.spelled(s)
	}
	for _, v := range r.exact {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, Redacted)
		}
	}
	return s
}

// spelled replaces every match of a pattern in s's letters and digits, from
// the first matched character to the last, separators and escapes
// between them included.
func (r *Redactor) spelled(s string) string {
	m := matchText(s)
	b := m.b
	var spans [][2]int
	for i := 0; i+minSpelledLen <= len(b); i++ {
		k := binary.LittleEndian.Uint64(b[i:]) | foldBits
		if h := r.filterBit(k); r.filter[h/64]&(1<<(h%64)) == 0 {
			continue
		}
		for _, pi := range r.first[k] {
			p := r.pats[pi]
			if !p.matches(b[i:]) {
				continue
			}
			end := i + len(p.s) - 1
			start, stop := int(m.start[i]), int(m.start[end])+width(s, int(m.start[end]))
			for n := 0; n < 6 && stop < len(s) && s[stop] == '='; n++ {
				stop++ // an encoding's padding says how long the value is
			}
			if n := len(spans); n > 0 && start <= spans[n-1][1] {
				spans[n-1][1] = max(spans[n-1][1], stop)
			} else {
				spans = append(spans, [2]int{start, stop})
			}
		}
	}
	if spans == nil {
		return s
	}
	var out strings.Builder
	out.Grow(len(s))
	at := 0
	for _, sp := range spans {
		out.WriteString(s[at:sp[0]])
		out.WriteString(Redacted)
		at = sp[1]
	}
	out.WriteString(s[at:])
	return out.String()
}

// matches compares all of p, whatever the first difference, so that the
// time it takes does not say how far b agrees with p.
func (p pattern) matches(b []byte) bool {
	if len(b) < len(p.s) {
		return false
	}
	var fold, diff byte
	if p.fold {
		fold = 0x20
	}
	for j := 0; j < len(p.s); j++ {
		diff |= (b[j] | fold) ^ p.s[j]
	}
	return diff == 0
}

// matched is a text as the Redactor matches it: its letters and digits
// (escapes decoded), each with where it starts in the text.
type matched struct {
	b     []byte
	start []int32
}

// class sorts bytes for matchText: 1 a letter or digit, 2 the start of an
// escape, 0 a separator.
var class = func() (c [256]uint8) {
	for i := range 256 {
		switch b := byte(i); {
		case b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z':
			c[i] = 1
		case b == '\\' || b == '%' || b == '&':
			c[i] = 2
		}
	}
	return c
}()

func unhex(s string) (byte, bool) {
	var v byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | c
	}
	return v, true
}

// matchText keeps s's letters and digits. An escape of an ASCII letter or
// digit counts as that character; any other escape, and every other byte,
// separates.
func matchText(s string) matched {
	m := matched{b: make([]byte, 0, len(s)), start: make([]int32, 0, len(s))}
	for i := 0; i < len(s); {
		switch class[s[i]] {
		case 0:
			i++
		case 1:
			m.b = append(m.b, s[i])
			m.start = append(m.start, int32(i))
			i++
		default:
			c, w := unescape(s[i:])
			if class[c] == 1 {
				m.b = append(m.b, c)
				m.start = append(m.start, int32(i))
			}
			i += w
		}
	}
	return m
}

// unescape reads the escape at the start of s (which starts with one of
// \ % &): the character it stands for (0 when none that matters) and
// its length. Runs of backslashes belong to the escape after them, so that
// a doubly escaped \\u0073 is still an s and a JSON \n is not an n.
func unescape(s string) (byte, int) {
	switch s[0] {
	case '%':
		if len(s) >= 3 {
			if v, ok := unhex(s[1:3]); ok {
				return v, 3
			}
		}
		return 0, 1
	case '&':
		if len(s) > 3 && s[1] == '#' {
			if v, w, ok := htmlRef(s); ok {
				return v, w
			}
		}
		return 0, 1
	}
	j := 0
	for j < len(s) && j < 64 && s[j] == '\\' {
		j++
	}
	rest := s[j:]
	switch {
	case len(rest) >= 5 && rest[0] == 'u' && rest[1] == '0' && rest[2] == '0':
		if v, ok := unhex(rest[3:5]); ok {
			return v, j + 5
		}
	case len(rest) >= 3 && rest[0] == 'x':
		if v, ok := unhex(rest[1:3]); ok {
			return v, j + 3
		}
	case len(rest) >= 1 && strings.IndexByte("nrtbf", rest[0]) >= 0:
		return 0, j + 1
	}
	return 0, j
}

// width is how many bytes of s the matched character at i takes.
func width(s string, i int) int {
	if class[s[i]] == 1 {
		return 1
	}
	_, w := unescape(s[i:])
	return w
}

// htmlRef decodes a numeric character reference (&#115; or &#x73;) of an
// ASCII character at the start of s.
func htmlRef(s string) (byte, int, bool) {
	i, base := 2, 10
	if s[i] == 'x' || s[i] == 'X' {
		i, base = 3, 16
	}
	v, digits := 0, 0
	for ; i < len(s) && digits < 7; i++ {
		c := s[i]
		var d int
		switch {
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case base == 16 && c >= 'a' && c <= 'f':
			d = int(c-'a') + 10
		case base == 16 && c >= 'A' && c <= 'F':
			d = int(c-'A') + 10
		case c == ';' && digits > 0 && v < 128:
			return byte(v), i + 1, true
		default:
			return 0, 0, false
		}
		v, digits = v*base+d, digits+1
	}
	return 0, 0, false
}
