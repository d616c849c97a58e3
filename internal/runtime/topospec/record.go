package topospec

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// RecordVersion is the version of the record's JSON form.
const RecordVersion = 1

// record is the applied spec as a backend keeps it with the proxy (a
// label on the container, an annotation on the Deployment).
type record struct {
	V    int  `json:"v"`
	Spec Spec `json:"spec"`
}

// MarshalRecord is the record of an applied spec: one JSON document, the
// only place the topology's inputs are kept on the backend. Read, Import
// and role resolution read it back; the proxy's command line is derived
// from it, never the other way round.
func MarshalRecord(s Spec) (string, error) {
	b, err := json.Marshal(record{V: RecordVersion, Spec: s})
	if err != nil {
		return "", fmt.Errorf("topology record: %w", err)
	}
	return string(b), nil
}

// ParseRecord reads a record back. Every value is parsed by its own type
// (an allow entry by proxy.ParsePattern, addresses by netip): an entry
// that does not parse, an unknown field or another version is an error,
// never dropped.
func ParseRecord(text string) (Spec, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.DisallowUnknownFields()
	var r record
	if err := dec.Decode(&r); err != nil {
		return Spec{}, fmt.Errorf("topology record: %w", err)
	}
	if r.V != RecordVersion {
		return Spec{}, fmt.Errorf("topology record: version %d, this provider reads %d", r.V, RecordVersion)
	}
	return r.Spec, nil
}

// LegacyArgs is what a proxy made before records shows on its command
// line: the settings as flag values, unparsed.
type LegacyArgs struct {
	Listen       string
	Allow        []string
	AllowPrivate []string
	DNS          []string
}

// ReadLegacyArgs reads the proxy's flags ("--flag value" pairs) from its
// arguments. It is the one argv reader left, for two uses only: importing
// a topology whose proxy carries no record (made by an earlier release),
// and saying what an out-of-band edit of a live command line changed.
func ReadLegacyArgs(args []string) LegacyArgs {
	var l LegacyArgs
	for i := 0; i+1 < len(args); i++ {
		v := args[i+1]
		switch args[i] {
		case "--listen":
			l.Listen = v
		case "--allow":
			l.Allow = append(l.Allow, v)
		case "--allow-private":
			l.AllowPrivate = append(l.AllowPrivate, v)
		case "--dns":
			l.DNS = append(l.DNS, v)
		default:
			continue
		}
		i++
	}
	return l
}
