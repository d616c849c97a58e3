// Package mirror checks a release's artifacts (what .goreleaser.yaml writes
// into dist/) and lays them out as a Terraform provider mirror:
//
//	<dir>/<host>/<namespace>/<type>/terraform-provider-<type>_<version>_<os>_<arch>.zip
//	<dir>/<host>/<namespace>/<type>/index.json
//	<dir>/<host>/<namespace>/<type>/<version>.json
//
// The zips sit where a filesystem_mirror looks for packed providers, and
// the two JSON files are what a network mirror serves from the same folder
// (the "url" of an archive is relative to <version>.json), so one directory
// works as either: copied to a disk or put behind an HTTPS server.
//
// Nothing is trusted on the way: SHA256SUMS must carry a signature by the
// release key pinned in the repository (package releasekey), never merely
// by the key dist/ ships beside it; every zip must match the sums line for
// it, must hold the provider binary Terraform will run, and must carry the
// agent-runner for each architecture asked for, so a re-signed or broken
// archive, a wrong checksum or a missing runner stops the install rather
// than a later apply.
package mirror

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"golang.org/x/mod/sumdb/dirhash"

	"github.com/bogpad/terraform-provider-meepa/releasekey"
)

// Release names one provider release in a dist/ folder.
type Release struct {
	Dist      string // the folder GoReleaser wrote
	Type      string // "meepa"
	Version   string // "0.1.0"
	Runners   []string
	Namespace string // "bogpad"
	Host      string // "registry.terraform.io"
}

// Archive is one platform's zip, checked.
type Archive struct {
	Platform string // "linux_amd64"
	File     string // the path in dist/
	SHA256   string // hex, from SHA256SUMS and recomputed
	H1       string // Terraform's "h1:" hash of the zip's contents
}

func (r Release) prefix() string { return "terraform-provider-" + r.Type + "_" + r.Version }

// SumsFile is the path of the release's SHA256SUMS.
func (r Release) SumsFile() string { return filepath.Join(r.Dist, r.prefix()+"_SHA256SUMS") }

// DistKeyFile is the public half of whatever key signed dist/, which
// scripts/release.sh leaves there. It vouches for nothing by itself: anyone
// who can change the release can change it too.
const DistKeyFile = "signing-key.asc"

// Trust says which keys may vouch for a release's SHA256SUMS: the release
// key pinned in package releasekey, and one throwaway snapshot key only
// when SnapshotKey names it.
type Trust struct {
	// SnapshotKey is the fingerprint of a throwaway key that signed a
	// snapshot on this machine (scripts/release.sh records it when it makes
	// one and forgets the private half). When set, a signature by that key
	// is accepted too, its public half taken from dist/signing-key.asc; a
	// different key found there is still refused. Empty: the pinned key only.
	SnapshotKey string

	// pinned stands in for releasekey.Armored in tests, which cannot sign
	// with the real release key.
	pinned string
}

// Signer is the key whose signature on SHA256SUMS was accepted.
type Signer struct {
	Fingerprint string // 40 upper-case hex digits
	Pinned      bool   // the release key; false for a trusted snapshot key
}

// ErrUntrustedSigner is what Check returns, wrapped with the fingerprints
// involved, when SHA256SUMS is signed by a key it does not trust.
var ErrUntrustedSigner = errors.New("not signed by a trusted key")

// ReadKeys parses an armored public key block.
func ReadKeys(armored string) (openpgp.EntityList, error) {
	el, err := openpgp.ReadArmoredKeyRing(strings.NewReader(armored))
	if err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	if len(el) == 0 {
		return nil, errors.New("read keys: no key in the block")
	}
	return el, nil
}

// Fingerprint is an entity's primary key fingerprint, as gpg prints it
// without spaces.
func Fingerprint(e *openpgp.Entity) string {
	return strings.ToUpper(hex.EncodeToString(e.PrimaryKey.Fingerprint))
}

func normFingerprint(s string) string {
	return strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(strings.TrimSpace(s), "0x"), " ", ""))
}

// verifySums reads SHA256SUMS and checks its detached signature (binary, as
// GoReleaser's gpg step writes it, or armored) against the keys t trusts.
// It returns the bytes it verified, so the sums parsed later are the ones
// signed, not a file swapped in between.
func (r Release) verifySums(t Trust) ([]byte, Signer, error) {
	sumsName := filepath.Base(r.SumsFile())
	armoredPinned := t.pinned
	if armoredPinned == "" {
		armoredPinned = releasekey.Armored
	}
	pinned, err := ReadKeys(armoredPinned)
	if err != nil {
		return nil, Signer{}, fmt.Errorf("the pinned release key (%s): %w", releasekey.File, err)
	}
	sums, err := os.ReadFile(r.SumsFile())
	if err != nil {
		return nil, Signer{}, fmt.Errorf("read sums: %w", err)
	}
	sig, err := os.ReadFile(r.SumsFile() + ".sig")
	if err != nil {
		return nil, Signer{}, fmt.Errorf("%s is not signed: %w", sumsName, err)
	}
	if bytes.HasPrefix(bytes.TrimSpace(sig), []byte("-----BEGIN")) {
		blk, err := armor.Decode(bytes.NewReader(sig))
		if err != nil {
			return nil, Signer{}, fmt.Errorf("%s.sig: %w", sumsName, err)
		}
		if sig, err = io.ReadAll(blk.Body); err != nil {
			return nil, Signer{}, fmt.Errorf("%s.sig: %w", sumsName, err)
		}
	}

	keyring := append(openpgp.EntityList{}, pinned...)
	if t.SnapshotKey != "" {
		e, err := r.distKey(normFingerprint(t.SnapshotKey))
		if err != nil {
			return nil, Signer{}, err
		}
		keyring = append(keyring, e)
	}
	signer, err := openpgp.CheckDetachedSignature(keyring, bytes.NewReader(sums), bytes.NewReader(sig), nil)
	if errors.Is(err, pgperrors.ErrUnknownIssuer) {
		return nil, Signer{}, r.untrusted(sig, pinned, t)
	}
	if err != nil {
		return nil, Signer{}, fmt.Errorf("signature on %s does not hold: %w", sumsName, err)
	}
	fpr := Fingerprint(signer)
	return sums, Signer{Fingerprint: fpr, Pinned: inList(pinned, fpr)}, nil
}

// distKey is the key with fingerprint fpr in dist/signing-key.asc.
func (r Release) distKey(fpr string) (*openpgp.Entity, error) {
	path := filepath.Join(r.Dist, DistKeyFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the snapshot key %s: %w", fpr, err)
	}
	el, err := ReadKeys(string(raw))
	if err != nil {
		return nil, fmt.Errorf("the snapshot key %s: %s: %w", fpr, path, err)
	}
	for _, e := range el {
		if Fingerprint(e) == fpr {
			return e, nil
		}
	}
	return nil, fmt.Errorf("%w: %s does not hold the snapshot key %s this machine made (it holds %s)",
		ErrUntrustedSigner, path, fpr, fingerprints(el))
}

// untrusted explains a signature by a key outside the keyring: which key
// made it and which ones would have been accepted.
func (r Release) untrusted(sig []byte, pinned openpgp.EntityList, t Trust) error {
	by := "an unknown key"
	if p, err := packet.NewReader(bytes.NewReader(sig)).Next(); err == nil {
		if s, ok := p.(*packet.Signature); ok {
			switch {
			case len(s.IssuerFingerprint) > 0:
				by = "key " + strings.ToUpper(hex.EncodeToString(s.IssuerFingerprint))
			case s.IssuerKeyId != nil:
				by = fmt.Sprintf("key ID %016X", *s.IssuerKeyId)
			}
		}
	}
	want := "the pinned release key " + fingerprints(pinned) + " (" + releasekey.File + ")"
	if t.SnapshotKey != "" {
		want += " nor this machine's snapshot key " + normFingerprint(t.SnapshotKey)
	}
	return fmt.Errorf("%w: %s is signed by %s, not by %s; a key shipped in %s vouches for nothing",
		ErrUntrustedSigner, filepath.Base(r.SumsFile()), by, want, filepath.Join(r.Dist, DistKeyFile))
}

func inList(el openpgp.EntityList, fpr string) bool {
	for _, e := range el {
		if Fingerprint(e) == fpr {
			return true
		}
	}
	return false
}

func fingerprints(el openpgp.EntityList) string {
	var out []string
	for _, e := range el {
		out = append(out, Fingerprint(e))
	}
	return strings.Join(out, ", ")
}

// ReadSums parses a SHA256SUMS file: "<hex>  <name>" per line.
func ReadSums(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read sums: %w", err)
	}
	return parseSums(path, raw)
}

func parseSums(path string, raw []byte) (map[string]string, error) {
	sums := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		sum, name, ok := strings.Cut(line, " ")
		name = strings.TrimLeft(strings.TrimSpace(name), "*")
		if !ok || len(sum) != sha256.Size*2 || name == "" {
			return nil, fmt.Errorf("read sums: %s line %d: not \"<sha256>  <file>\"", path, n)
		}
		if _, err := hex.DecodeString(sum); err != nil {
			return nil, fmt.Errorf("read sums: %s line %d: %w", path, n, err)
		}
		sums[name] = strings.ToLower(sum)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read sums: %w", err)
	}
	return sums, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }() // read-only
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Check verifies the signature on the release's SHA256SUMS against the keys
// t trusts, then the release in Dist against those sums, and returns the
// key that signed and the archives, sorted by platform. Every file the sums
// name must be there and match; the manifest must be among them; every
// archive must hold the provider binary and the runners in Runners.
func (r Release) Check(t Trust) (Signer, []Archive, error) {
	raw, signer, err := r.verifySums(t)
	if err != nil {
		return Signer{}, nil, err
	}
	archives, err := r.checkSums(raw)
	if err != nil {
		return Signer{}, nil, err
	}
	return signer, archives, nil
}

// checkSums checks the files the (verified) sums name.
func (r Release) checkSums(raw []byte) ([]Archive, error) {
	sums, err := parseSums(r.SumsFile(), raw)
	if err != nil {
		return nil, err
	}
	zipName := regexp.MustCompile("^" + regexp.QuoteMeta(r.prefix()) + `_([a-z0-9]+_[a-z0-9]+)\.zip$`)
	manifest := r.prefix() + "_manifest.json"
	var archives []Archive
	sawManifest := false
	for name, want := range sums {
		got, err := fileSHA256(filepath.Join(r.Dist, name))
		if err != nil {
			return nil, fmt.Errorf("check %s: %w", name, err)
		}
		if got != want {
			return nil, fmt.Errorf("check %s: sha256 is %s, SHA256SUMS says %s", name, got, want)
		}
		if name == manifest {
			sawManifest = true
			continue
		}
		m := zipName.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		a := Archive{Platform: m[1], File: filepath.Join(r.Dist, name), SHA256: got}
		if err := r.checkZip(a.File); err != nil {
			return nil, err
		}
		if a.H1, err = dirhash.HashZip(a.File, dirhash.Hash1); err != nil {
			return nil, fmt.Errorf("hash %s: %w", name, err)
		}
		archives = append(archives, a)
	}
	if !sawManifest {
		return nil, fmt.Errorf("check: %s is not in %s", manifest, filepath.Base(r.SumsFile()))
	}
	if len(archives) == 0 {
		return nil, fmt.Errorf("check: %s lists no %s_<os>_<arch>.zip", filepath.Base(r.SumsFile()), r.prefix())
	}
	sort.Slice(archives, func(i, j int) bool { return archives[i].Platform < archives[j].Platform })
	return archives, nil
}

// checkZip opens the archive as Terraform will and looks for what it needs.
func (r Release) checkZip(path string) error {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return fmt.Errorf("check %s: %w", filepath.Base(path), err)
	}
	defer func() { _ = zr.Close() }() // read-only
	have := map[string]*zip.File{}
	for _, f := range zr.File {
		have[f.Name] = f
	}
	want := append([]string{"terraform-provider-" + r.Type + "_v" + r.Version}, r.runnerFiles()...)
	for _, name := range want {
		f, ok := have[name]
		if !ok {
			return fmt.Errorf("check %s: no %s in the archive", filepath.Base(path), name)
		}
		if f.Mode()&0o111 == 0 {
			return fmt.Errorf("check %s: %s is not executable (mode %v)", filepath.Base(path), name, f.Mode())
		}
		// Reading it whole checks the zip's CRC as Terraform's unzip will.
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("check %s: %s: %w", filepath.Base(path), name, err)
		}
		_, err = io.Copy(io.Discard, rc)
		_ = rc.Close() // read-only; read in full above
		if err != nil {
			return fmt.Errorf("check %s: %s: %w", filepath.Base(path), name, err)
		}
	}
	return nil
}

func (r Release) runnerFiles() []string {
	var out []string
	for _, arch := range r.Runners {
		out = append(out, "agent-runner-linux-"+arch)
	}
	return out
}

// Index is a network mirror's <type>/index.json.
type Index struct {
	Versions map[string]struct{} `json:"versions"`
}

// VersionIndex is a network mirror's <type>/<version>.json.
type VersionIndex struct {
	Archives map[string]VersionArchive `json:"archives"`
}

// VersionArchive is one platform in VersionIndex: the zip's location
// relative to the JSON file and the hashes a lock file may hold for it.
type VersionArchive struct {
	URL    string   `json:"url"`
	Hashes []string `json:"hashes"`
}

// Install copies the archives into dir as a packed filesystem mirror and
// writes the network mirror's index files beside them. Versions already in
// the mirror stay listed; this version's archives and JSON are replaced.
// It returns the folder it wrote.
func (r Release) Install(dir string, archives []Archive) (string, error) {
	dst := filepath.Join(dir, r.Host, r.Namespace, r.Type)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", fmt.Errorf("install mirror: %w", err)
	}
	// A platform this release no longer builds must not linger from an
	// earlier install of the same version: Terraform would offer it.
	old, _ := filepath.Glob(filepath.Join(dst, r.prefix()+"_*.zip"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return "", fmt.Errorf("install mirror: %w", err)
		}
	}
	vi := VersionIndex{Archives: map[string]VersionArchive{}}
	for _, a := range archives {
		name := filepath.Base(a.File)
		if err := copyFile(a.File, filepath.Join(dst, name)); err != nil {
			return "", fmt.Errorf("install mirror: %w", err)
		}
		vi.Archives[a.Platform] = VersionArchive{URL: name, Hashes: []string{a.H1, "zh:" + a.SHA256}}
	}
	if err := writeJSON(filepath.Join(dst, r.Version+".json"), vi); err != nil {
		return "", err
	}
	idx := Index{Versions: map[string]struct{}{}}
	if raw, err := os.ReadFile(filepath.Join(dst, "index.json")); err == nil {
		if err := json.Unmarshal(raw, &idx); err != nil || idx.Versions == nil {
			idx = Index{Versions: map[string]struct{}{}}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("install mirror: %w", err)
	}
	idx.Versions[r.Version] = struct{}{}
	if err := writeJSON(filepath.Join(dst, "index.json"), idx); err != nil {
		return "", err
	}
	return dst, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }() // read-only
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close() // the copy failed: that error is the one to report
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func writeJSON(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}
