package image

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

const (
	// ContainerRepo is the repository of container images.
	ContainerRepo = "meepa-sandbox"
	// IsolatedRepo is the repository of isolation images.
	IsolatedRepo = "meepagateway-isolated"
	// maxTagLen is Docker's limit on a tag.
	maxTagLen = 128
	hashLen   = 12
)

// ContentHash is the 12-hex-digit hash that names a container image. It
// covers everything that changes the result: the base image's id (not its
// name, so a rebuilt base gives a new hash), the packages and env vars
// (order-independent), the package manager and the Dockerfile template.
func ContentHash(baseImageID string, s Spec) string {
	h := sha256.New()
	// Length-prefixed fields: no two different inputs can concatenate to
	// the same byte stream.
	field := func(kind, v string) {
		h.Write([]byte(kind))
		h.Write([]byte{0})
		var n [8]byte
		for i, l := 0, uint64(len(v)); i < 8; i++ {
			n[i] = byte(l >> (8 * i))
		}
		h.Write(n[:])
		h.Write([]byte(v))
	}
	field("template", TemplateVersion)
	field("base-id", baseImageID)
	field("manager", string(s.manager()))
	for _, p := range s.sortedPackages() {
		field("package", p)
	}
	for _, k := range s.sortedEnvKeys() {
		field("env-name", k)
		field("env-value", s.Env[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:hashLen]
}

// ContainerTag is the container image's reference for a content hash.
func ContainerTag(hash string) string { return ContainerRepo + ":" + hash }

// IsolatedTag is the isolation image's reference,
// meepagateway-isolated:{version}-{base}, where {base} is the image it
// layers onto with every character a tag cannot hold (':' '/' '@' …)
// replaced by '-'.
//
// The mapping is injective in the base reference: replacing characters loses
// information ("registry.example.com/team:v1" and
// "registry.example.com-team:v1" both read "registry.example.com-team-v1"),
// so whenever the tag is not the ordinary one it ends in a hash of the raw
// version and reference. Ordinary tags are kept as the spec writes them:
// the provider's own container images (meepa-sandbox:<content hash>), and
// references that need no replacement at all; an ordinary-looking
// reference that ends like a hash suffix ("x-0123456789ab") is hashed too,
// so that it can never equal another reference's hashed tag. A tag longer
// than Docker's 128 characters keeps its head and ends in the same hash.
func IsolatedTag(version, base string) string {
	tag := sanitizeTag(version + "-" + base)
	if !ordinaryIsolated(version, base) || len(tag) > maxTagLen {
		sum := refHash(version, base)
		if len(tag) > maxTagLen-hashLen-1 {
			tag = tag[:maxTagLen-hashLen-1]
		}
		tag = strings.TrimRight(tag, "-.") + "-" + sum
	}
	return IsolatedRepo + ":" + tag
}

// ordinaryIsolated: version-base can be written as it is, without a hash,
// and still name this (version, base) pair only.
func ordinaryIsolated(version, base string) bool {
	// The version is one per provider build; the mapping is injective in
	// the base for a given version.
	if version == "" || sanitizeTag(version) != version {
		return false
	}
	if h, ok := strings.CutPrefix(base, ContainerRepo+":"); ok && isHex(h, hashLen) {
		return true
	}
	if sanitizeTag(base) != base {
		return false
	}
	// "x-0123456789ab" written as is could equal the hashed tag of "x/…";
	// and "meepa-sandbox-<hash>" would equal the provider's own image's.
	if i := strings.LastIndexByte(base, '-'); i >= 0 && isHex(base[i+1:], hashLen) {
		return false
	}
	return true
}

// refHash is the short hash that keeps a non-ordinary isolation tag
// unique: over the raw, length-prefixed version and reference.
func refHash(version, base string) string {
	h := sha256.New()
	for _, f := range []string{version, base} {
		var n [8]byte
		for i, l := 0, uint64(len(f)); i < 8; i++ {
			n[i] = byte(l >> (8 * i))
		}
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))[:hashLen]
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// sanitizeTag maps s onto Docker's tag grammar [A-Za-z0-9_][A-Za-z0-9_.-]*.
func sanitizeTag(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c == '_' || c == '.' || c == '-' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if !ok {
			b[i] = '-'
		}
	}
	if len(b) == 0 || b[0] == '.' || b[0] == '-' {
		b = append([]byte("v"), b...)
	}
	return string(b)
}
