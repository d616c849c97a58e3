package mirror

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"

	"github.com/bogpad/terraform-provider-meepa/releasekey"
)

// keys stand for the three parties of a release: the maintainers' release
// key (pinned), an attacker who re-signs a tampered release with a key of
// their own, and the throwaway key a local snapshot is signed with.
type keys struct {
	pinned, attacker, snapshot *openpgp.Entity
}

var (
	keysOnce sync.Once
	keysVal  keys
	keysErr  error
)

// testKeys makes the keys once per test binary (Ed25519: fast to make).
func testKeys(t *testing.T) keys {
	t.Helper()
	keysOnce.Do(func() {
		cfg := &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA}
		mk := func(name string) *openpgp.Entity {
			if keysErr != nil {
				return nil
			}
			var e *openpgp.Entity
			e, keysErr = openpgp.NewEntity(name, "", name+"@meepa.invalid", cfg)
			return e
		}
		keysVal = keys{pinned: mk("pinned"), attacker: mk("attacker"), snapshot: mk("snapshot")}
	})
	if keysErr != nil {
		t.Fatal(keysErr)
	}
	return keysVal
}

func armoredPublic(t *testing.T, es ...*openpgp.Entity) string {
	t.Helper()
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if err := e.Serialize(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// pinnedTrust trusts the test's pinned key and nothing else.
func pinnedTrust(t *testing.T) Trust {
	return Trust{pinned: armoredPublic(t, testKeys(t).pinned)}
}

// signSums writes SHA256SUMS.sig (binary, as GoReleaser's gpg step does)
// by key, and key's public half as dist/signing-key.asc, as
// scripts/release.sh leaves it.
func signSums(t *testing.T, r Release, key *openpgp.Entity) {
	t.Helper()
	sums, err := os.ReadFile(r.SumsFile())
	if err != nil {
		t.Fatal(err)
	}
	var sig bytes.Buffer
	if err := openpgp.DetachSign(&sig, key, bytes.NewReader(sums), nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.SumsFile()+".sig", sig.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	writeDistKey(t, r, key)
}

func writeDistKey(t *testing.T, r Release, es ...*openpgp.Entity) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(r.Dist, DistKeyFile), []byte(armoredPublic(t, es...)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tamper swaps the linux_amd64 archive for one with another provider
// binary and rewrites SHA256SUMS to match, as an attacker would before
// re-signing it.
func tamper(t *testing.T, r Release) {
	t.Helper()
	p := filepath.Join(r.Dist, "terraform-provider-meepa_1.2.3_linux_amd64.zip")
	writeZip(t, p, map[string]string{
		"terraform-provider-meepa_v1.2.3": "evil provider",
		"agent-runner-linux-amd64":        "evil runner amd64",
		"agent-runner-linux-arm64":        "evil runner arm64",
	}, 0o755)
	sums, err := ReadSums(r.SumsFile())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for name := range sums {
		fmt.Fprintf(&b, "%s  %s\n", sumOf(t, filepath.Join(r.Dist, name)), name)
	}
	if err := os.WriteFile(r.SumsFile(), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckSignature: only the pinned key vouches for a release; the key
// dist/ ships beside it never does; a throwaway snapshot key only when the
// caller names it.
func TestCheckSignature(t *testing.T) {
	k := testKeys(t)
	pinned, attacker, snapshot := Fingerprint(k.pinned), Fingerprint(k.attacker), Fingerprint(k.snapshot)
	cases := map[string]struct {
		prepare    func(t *testing.T, r Release)
		snapshot   string // Trust.SnapshotKey
		wantSigner Signer
		wantErr    []string // all in the error; nil: accepted
		untrusted  bool     // the error wraps ErrUntrustedSigner
	}{
		"signed by the pinned key": {
			prepare:    func(t *testing.T, r Release) {},
			wantSigner: Signer{Fingerprint: pinned, Pinned: true},
		},
		"signed by the pinned key, no key in dist": {
			prepare: func(t *testing.T, r Release) {
				if err := os.Remove(filepath.Join(r.Dist, DistKeyFile)); err != nil {
					t.Fatal(err)
				}
			},
			wantSigner: Signer{Fingerprint: pinned, Pinned: true},
		},
		"signed by the pinned key, opt-in given": {
			prepare:    func(t *testing.T, r Release) { writeDistKey(t, r, k.pinned, k.snapshot) },
			snapshot:   snapshot,
			wantSigner: Signer{Fingerprint: pinned, Pinned: true},
		},
		"armored signature by the pinned key": {
			prepare: func(t *testing.T, r Release) {
				sums, _ := os.ReadFile(r.SumsFile())
				var sig bytes.Buffer
				if err := openpgp.ArmoredDetachSign(&sig, k.pinned, bytes.NewReader(sums), nil); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(r.SumsFile()+".sig", sig.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantSigner: Signer{Fingerprint: pinned, Pinned: true},
		},
		// The attack of issue 19: a tampered zip, the sums re-signed by
		// another key, and that key dropped into dist/.
		"re-signed by a key dropped into dist": {
			prepare: func(t *testing.T, r Release) { tamper(t, r); signSums(t, r, k.attacker) },
			wantErr: []string{
				"is signed by key " + attacker,
				"not by the pinned release key " + pinned,
				"vouches for nothing",
			},
			untrusted: true,
		},
		"re-signed by a key dropped into dist, opt-in given": {
			prepare:   func(t *testing.T, r Release) { tamper(t, r); signSums(t, r, k.attacker) },
			snapshot:  snapshot,
			wantErr:   []string{"does not hold the snapshot key " + snapshot, attacker},
			untrusted: true,
		},
		"re-signed, the snapshot key's public half shipped beside the attacker's": {
			prepare: func(t *testing.T, r Release) {
				tamper(t, r)
				signSums(t, r, k.attacker)
				writeDistKey(t, r, k.snapshot, k.attacker)
			},
			snapshot: snapshot,
			wantErr: []string{
				"is signed by key " + attacker,
				"not by the pinned release key " + pinned + " (" + releasekey.File + ") nor this machine's snapshot key " + snapshot,
			},
			untrusted: true,
		},
		"throwaway snapshot key without the opt-in": {
			prepare:   func(t *testing.T, r Release) { signSums(t, r, k.snapshot) },
			wantErr:   []string{"is signed by key " + snapshot, "not by the pinned release key " + pinned},
			untrusted: true,
		},
		"throwaway snapshot key with the opt-in": {
			prepare:    func(t *testing.T, r Release) { signSums(t, r, k.snapshot) },
			snapshot:   strings.ToLower(snapshot[:20] + " " + snapshot[20:]), // as a person might paste it
			wantSigner: Signer{Fingerprint: snapshot, Pinned: false},
		},
		"sums changed after signing": {
			prepare: func(t *testing.T, r Release) { tamper(t, r) },
			wantErr: []string{"signature on terraform-provider-meepa_1.2.3_SHA256SUMS does not hold"},
		},
		"no signature": {
			prepare: func(t *testing.T, r Release) {
				if err := os.Remove(r.SumsFile() + ".sig"); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: []string{"terraform-provider-meepa_1.2.3_SHA256SUMS is not signed"},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r, _ := fakeDist(t)
			c.prepare(t, r)
			tr := pinnedTrust(t)
			tr.SnapshotKey = c.snapshot
			signer, archives, err := r.Check(tr)
			if c.wantErr == nil {
				if err != nil {
					t.Fatalf("Check() = %v, want it accepted", err)
				}
				if signer != c.wantSigner || len(archives) != 2 {
					t.Fatalf("Check() = %+v, %d archives; want %+v, 2", signer, len(archives), c.wantSigner)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check() accepted the release (signer %+v), want an error containing %q", signer, c.wantErr)
			}
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check() error = %v\nwant it to contain %q", err, w)
				}
			}
			if got := errors.Is(err, ErrUntrustedSigner); got != c.untrusted {
				t.Errorf("errors.Is(err, ErrUntrustedSigner) = %v, want %v", got, c.untrusted)
			}
		})
	}
}

// TestCheckDefaultsToReleaseKey: a Trust from outside this package (no
// test key) checks against releasekey's key, so a release signed by any
// other key, with that key in dist/, is refused, naming the real key.
func TestCheckDefaultsToReleaseKey(t *testing.T) {
	el, err := ReadKeys(releasekey.Armored)
	if err != nil || len(el) != 1 {
		t.Fatalf("releasekey.Armored: %d keys, %v; want one", len(el), err)
	}
	r, _ := fakeDist(t) // signed by the test's own key, which dist/ ships
	_, _, err = r.Check(Trust{})
	if !errors.Is(err, ErrUntrustedSigner) || !strings.Contains(err.Error(), "not by the pinned release key "+Fingerprint(el[0])) {
		t.Fatalf("Check(Trust{}) = %v, want a refusal naming %s", err, Fingerprint(el[0]))
	}
}

// gpgHome makes a keyring with one fresh RSA signing key, made by gpg as
// scripts/release.sh makes its throwaway key, and returns GNUPGHOME and the
// key's fingerprint. It skips the test when gpg is not installed.
func gpgHome(t *testing.T, name string) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Skip("gpg not installed (scripts/release.sh installs it: apt-get install gnupg)")
	}
	home := t.TempDir()
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kill := exec.Command("gpgconf", "--kill", "gpg-agent")
		kill.Env = append(os.Environ(), "GNUPGHOME="+home)
		_ = kill.Run() // the agent may not have started
	})
	gpg := func(args ...string) []byte {
		cmd := exec.Command("gpg", append([]string{"--batch", "--quiet"}, args...)...)
		cmd.Env = append(os.Environ(), "GNUPGHOME="+home)
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("gpg %v: %v\n%s", args, err, ee.Stderr)
			}
			t.Fatalf("gpg %v: %v", args, err)
		}
		return out
	}
	gpg("--passphrase", "", "--quick-gen-key", name+" <"+name+"@meepa.invalid>", "rsa3072", "sign", "1d")
	for _, l := range strings.Split(string(gpg("--with-colons", "--list-secret-keys")), "\n") {
		if f := strings.Split(l, ":"); len(f) > 9 && f[0] == "fpr" {
			return home, f[9]
		}
	}
	t.Fatal("gpg made no key")
	return "", ""
}

// TestCheckGPGSignature: a signature made by gpg exactly as
// .goreleaser.yaml's signs step makes it, with the key's public half
// exported as scripts/release.sh exports it, is accepted only as the
// pinned key or through the opt-in.
func TestCheckGPGSignature(t *testing.T) {
	home, fpr := gpgHome(t, "gpg snapshot")
	r, _ := fakeDist(t)
	run := func(args ...string) []byte {
		cmd := exec.Command("gpg", args...)
		cmd.Env = append(os.Environ(), "GNUPGHOME="+home)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("gpg %v: %v", args, err)
		}
		return out
	}
	run("--batch", "--yes", "--local-user", fpr, "--output", r.SumsFile()+".sig", "--detach-sign", r.SumsFile())
	pub := run("--batch", "--armor", "--export", fpr)
	if err := os.WriteFile(filepath.Join(r.Dist, DistKeyFile), pub, 0o644); err != nil {
		t.Fatal(err)
	}

	if _, _, err := r.Check(pinnedTrust(t)); !errors.Is(err, ErrUntrustedSigner) || !strings.Contains(err.Error(), "is signed by key "+fpr) {
		t.Errorf("without the opt-in: Check() = %v, want a refusal naming %s", err, fpr)
	}
	tr := pinnedTrust(t)
	tr.SnapshotKey = fpr
	if s, _, err := r.Check(tr); err != nil || s != (Signer{Fingerprint: fpr}) {
		t.Errorf("with the opt-in: Check() = %+v, %v; want accepted, by %s, not pinned", s, err, fpr)
	}
	if s, _, err := r.Check(Trust{pinned: string(pub)}); err != nil || s != (Signer{Fingerprint: fpr, Pinned: true}) {
		t.Errorf("as the pinned key: Check() = %+v, %v; want accepted as pinned", s, err)
	}
}
