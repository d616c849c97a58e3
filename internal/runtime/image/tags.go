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
// replaced by '-'. A tag longer than Docker's 128 characters keeps its
// head and ends in a hash of the whole, so it stays unique.
func IsolatedTag(version, base string) string {
	tag := sanitizeTag(version + "-" + base)
	if len(tag) > maxTagLen {
		sum := sha256.Sum256([]byte(tag))
		tag = strings.TrimRight(tag[:maxTagLen-hashLen-1], "-.") + "-" + hex.EncodeToString(sum[:])[:hashLen]
	}
	return IsolatedRepo + ":" + tag
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
