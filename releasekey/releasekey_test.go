package releasekey

import (
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
)

// TestKey: the pinned key is one public RSA signing key (what the Terraform
// registry accepts), with no private half, and README.md names its
// fingerprint, so a rotation that forgets either one fails here.
func TestKey(t *testing.T) {
	if strings.Contains(Armored, "PRIVATE KEY") {
		t.Fatal("release-key.asc holds private key material")
	}
	el, err := openpgp.ReadArmoredKeyRing(strings.NewReader(Armored))
	if err != nil {
		t.Fatal(err)
	}
	if len(el) != 1 {
		t.Fatalf("release-key.asc holds %d keys, want 1", len(el))
	}
	e := el[0]
	if e.PrivateKey != nil {
		t.Fatal("release-key.asc holds a private key")
	}
	if !e.PrimaryKey.PubKeyAlgo.CanSign() {
		t.Fatalf("primary key algorithm %v cannot sign", e.PrimaryKey.PubKeyAlgo)
	}
	if bits, err := e.PrimaryKey.BitLength(); err != nil || bits < 3072 {
		t.Fatalf("primary key: %d bits, %v; want RSA of 3072 bits or more", bits, err)
	}
	fpr := strings.ToUpper(hex.EncodeToString(e.PrimaryKey.Fingerprint))

	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	// gpg's spaced form: ten groups of four, two spaces in the middle.
	var spaced strings.Builder
	for i := 0; i < len(fpr); i += 4 {
		switch i {
		case 0:
		case 20:
			spaced.WriteString("  ")
		default:
			spaced.WriteString(" ")
		}
		spaced.WriteString(fpr[i : i+4])
	}
	if !strings.Contains(string(readme), spaced.String()) {
		t.Errorf("README.md does not name the key's fingerprint %s", spaced.String())
	}
	other := regexp.MustCompile(`[0-9A-F]{4}( {1,2}[0-9A-F]{4}){9}`).FindAllString(string(readme), -1)
	for _, o := range other {
		if o != spaced.String() {
			t.Errorf("README.md names another fingerprint, %s", o)
		}
	}
	if _, err := os.Stat(File[len("releasekey/"):]); err != nil {
		t.Errorf("File = %s: %v", File, err)
	}
}
