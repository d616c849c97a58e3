package firewall

import "regexp"

// Names that go into iptables-restore text as chain names and interface
// matches. A rule set is text: a name with a space or a newline in it would
// be a rule of its own, so anything that builds a set from outside input
// (the guard's command line) checks them first.
var (
	nameRE      = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	interfaceRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)
)

// ValidName reports whether s may name a rule set's owner (a topology or
// a managed network).
func ValidName(s string) bool { return nameRE.MatchString(s) }

// ValidInterface reports whether s may be a Linux interface name.
func ValidInterface(s string) bool { return interfaceRE.MatchString(s) }
