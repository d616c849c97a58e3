package agentspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strconv"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/docker/go-units"
)

// Typed values of the wire config. Each is parsed once where it enters:
// the provider's plan (from the attribute's string) or the config's
// Unmarshal in the runner (from the file or the Secret). The backends take
// the value and never parse it again. Each keeps the spelling it was
// parsed from and writes it back unchanged, so the file the previous
// release wrote reads and writes byte for byte the same, and a config's
// hash (which covers its JSON) does not move with the upgrade: "1G" stays
// "1G" rather than becoming "1g".

// Size is a number of bytes as an owner writes it: a positive integer and
// an optional binary unit b, k, m or g in either case ("512m", "1G"), as
// `docker run --memory` reads it. The zero Size is unset: its field's
// default applies.
type Size struct {
	n    int64
	text string
}

// sizeUnits are the units a Size is written in, largest first.
var sizeUnits = []struct {
	suffix byte
	shift  uint
}{{'g', 30}, {'m', 20}, {'k', 10}}

// SizeOf is n bytes, written in the largest unit that holds it exactly
// ("512m"), so that it equals the size parsed from that text; SizeOf(0) is
// unset.
func SizeOf(n int64) Size {
	if n == 0 {
		return Size{}
	}
	for _, u := range sizeUnits {
		if n%(1<<u.shift) == 0 {
			return Size{n: n, text: strconv.FormatInt(n>>u.shift, 10) + string(u.suffix)}
		}
	}
	return Size{n: n, text: strconv.FormatInt(n, 10)}
}

// ParseSize is the one parser of a size. Empty is unset (the zero Size);
// anything else must be a positive integer with an optional unit: Docker
// reads more (fractions, "MiB"), but one form is what the docs promise.
func ParseSize(s string) (Size, error) {
	if s == "" {
		return Size{}, nil
	}
	if !sizePattern.MatchString(s) {
		return Size{}, fmt.Errorf("%q is not a size: write a positive number with an optional unit b, k, m or g (either case), e.g. \"512m\" or \"1g\"", s)
	}
	n, err := units.RAMInBytes(s)
	if err != nil {
		return Size{}, fmt.Errorf("%q is not a size: %w", s, err)
	}
	if n <= 0 {
		return Size{}, fmt.Errorf("%q: a size must be positive, e.g. \"512m\"", s)
	}
	return Size{n: n, text: s}, nil
}

// Bytes is the size in bytes; 0 when unset.
func (s Size) Bytes() int64 { return s.n }

// IsZero reports whether s is unset.
func (s Size) IsZero() bool { return s.n == 0 }

// Or is s, or def when s is unset.
func (s Size) Or(def Size) Size {
	if s.IsZero() {
		return def
	}
	return s
}

// String is the spelling s was parsed from, or for a size made from a
// number its largest exact unit ("512m"); "" when unset.
func (s Size) String() string { return s.text }

// Equal reports whether two sizes are the same number of bytes, however
// written.
func (s Size) Equal(o Size) bool { return s.n == o.n }

func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return valueError[Size](err)
	}
	*s = v
	return nil
}

// MemoryOrDefault is a memory limit, DefaultMemoryBytes when unset.
func MemoryOrDefault(s Size) Size { return s.Or(SizeOf(DefaultMemoryBytes)) }

// UserSpec is a configured sandbox user: a numeric "uid" (the gid is the
// same) or "uid:gid", never root. The zero UserSpec is unset: the backend's
// default applies (AgentUser on a Docker host, DefaultUser on a cluster).
type UserSpec struct {
	u    User
	text string
}

// ParseUserSpec is the one parser of a configured user; empty is unset.
func ParseUserSpec(s string) (UserSpec, error) {
	if s == "" {
		return UserSpec{}, nil
	}
	u, err := ParseUser(s)
	if err != nil {
		return UserSpec{}, err
	}
	return UserSpec{u: u, text: s}, nil
}

// IsZero reports whether no user is configured.
func (s UserSpec) IsZero() bool { return s.u == User{} }

// User is the configured user, the zero User when unset.
func (s UserSpec) User() User { return s.u }

// Or is the configured user, or def when unset.
func (s UserSpec) Or(def User) User {
	if s.IsZero() {
		return def
	}
	return s.u
}

// String is the spelling s was parsed from ("3000" or "3000:3000"), or
// "uid:gid"; "" when unset.
func (s UserSpec) String() string {
	switch {
	case s.text != "":
		return s.text
	case s.IsZero():
		return ""
	}
	return s.u.String()
}

func (s UserSpec) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s *UserSpec) UnmarshalText(b []byte) error {
	v, err := ParseUserSpec(string(b))
	if err != nil {
		return valueError[UserSpec](err)
	}
	*s = v
	return nil
}

// valueError carries a parse error out of UnmarshalText as the one error
// type encoding/json adds the field's path to (Struct, Field), so that
// ParseConfig can name the setting at fault. Value holds the message;
// Offset -1 marks it as ours (encoding/json's own are at an offset).
func valueError[T any](err error) error {
	return &json.UnmarshalTypeError{Value: err.Error(), Type: reflect.TypeFor[T](), Offset: valueErrorOffset}
}

const valueErrorOffset = -1

// fieldOfDecode turns a decode error that names its field into a
// *fault.FieldError on that field (its path in the config file, as
// ValidateSettings names it); other errors are returned as they are.
func fieldOfDecode(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return err
	}
	msg := te.Value
	if te.Offset != valueErrorOffset {
		msg = fmt.Sprintf("a JSON %s cannot be read as %s", te.Value, te.Type)
	}
	return &fault.FieldError{Field: te.Field, Index: -1, Err: errors.New(msg)}
}

// Addr is an IP address of the config (container_mode.dns): parsed once
// where it enters, its spelling kept as Size's is.
type Addr struct {
	a    netip.Addr
	text string
}

// ParseAddr is the one parser of a config's address: an IPv4 or IPv6
// address, no zone, no name.
func ParseAddr(s string) (Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return Addr{}, fmt.Errorf("%q is not an IP address (a DNS upstream is an address, e.g. \"10.213.1.127\")", s)
	}
	return Addr{a: a, text: s}, nil
}

// AddrOf is a as an Addr, written in its canonical form.
func AddrOf(a netip.Addr) Addr { return Addr{a: a, text: a.String()} }

// AddrsOf is AddrOf of each; nil for none.
func AddrsOf(as []netip.Addr) []Addr {
	var out []Addr
	for _, a := range as {
		out = append(out, AddrOf(a))
	}
	return out
}

// Addr is the address; the zero netip.Addr when unset.
func (a Addr) Addr() netip.Addr { return a.a }

// String is the spelling a was parsed from.
func (a Addr) String() string { return a.text }

func (a Addr) MarshalText() ([]byte, error) { return []byte(a.text), nil }

func (a *Addr) UnmarshalText(b []byte) error {
	v, err := ParseAddr(string(b))
	if err != nil {
		return valueError[Addr](err)
	}
	*a = v
	return nil
}

// AddrStrings is the spelling of each address, as Docker's HostConfig
// takes them; nil for none.
func AddrStrings(as []Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}
