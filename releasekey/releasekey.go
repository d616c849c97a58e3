// Package releasekey holds the public half of the key that signs
// terraform-provider-meepa releases, pinned here so that what vouches for a
// release never travels with it: `make install-mirror` (internal/mirror)
// checks SHA256SUMS against this key and no other unless told to, and
// `make release` refuses to sign with any other. README.md in this folder
// says who holds the private half and how the key is replaced.
package releasekey

import _ "embed"

// Armored is release-key.asc, as checked in.
//
//go:embed release-key.asc
var Armored string

// File is where Armored comes from, relative to the repository's root, for
// messages that send a reader to it.
const File = "releasekey/release-key.asc"
