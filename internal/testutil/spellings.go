package testutil

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// Spellings are the ways a tool prints v that redact.Redactor promises
// to catch, each computed here from the standard encoders, not from the
// redact package's own helpers.
func Spellings(v string) map[string]string {
	b := []byte(v)
	hx := hex.EncodeToString(b)
	var rev []byte
	for i := len(b) - 1; i >= 0; i-- {
		rev = append(rev, b[i])
	}
	each := func(format string) string {
		var s strings.Builder
		for _, c := range b {
			fmt.Fprintf(&s, format, c)
		}
		return s.String()
	}
	wrapped := base64.StdEncoding.EncodeToString(b)
	return map[string]string{
		"literal":          v,
		"upper":            strings.ToUpper(v),
		"reversed":         string(rev),
		"base64":           base64.StdEncoding.EncodeToString(b),
		"base64 url raw":   base64.RawURLEncoding.EncodeToString(b),
		"base64 wrapped":   wrapped[:10] + "\n" + wrapped[10:],
		"base32":           base32.StdEncoding.EncodeToString(b),
		"hex":              hx,
		"HEX":              strings.ToUpper(hx),
		"hex spaced":       strings.TrimSpace(each("%02x ")),
		"spaced":           strings.TrimSpace(each("%c ")),
		"dashed":           strings.TrimSuffix(each("%c-"), "-"),
		"json \\u":         each(`\u%04x`),
		"json \\u partial": `\u00` + hx[:2] + v[1:],
		"double \\\\u":     each(`\\u%04X`),
		"c \\x":            each(`\x%02x`),
		"percent":          each("%%%02X"),
		"html":             each("&#%d;"),
		"split lines":      v[:len(v)/2] + "\n" + v[len(v)/2:],
	}
}

// InnerBase64 is the part of base64(prefix+v+suffix) that depends on v
// alone, for a prefix of off bytes.
func InnerBase64(blob string, off, n int) string {
	return blob[(8*off+5)/6 : 8*(off+n)/6]
}
