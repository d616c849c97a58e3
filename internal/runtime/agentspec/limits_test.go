package agentspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"512m": 512 << 20, "1g": 1 << 30, "64M": 64 << 20, "1024k": 1 << 20, "1G": 1 << 30, "4096": 4096, "": 0} {
		got, err := ParseSize(in)
		if err != nil || got.Bytes() != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got.Bytes(), err, want)
		}
		// The spelling is kept: the file reads and writes the same.
		if got.String() != in {
			t.Errorf("ParseSize(%q).String() = %q", in, got.String())
		}
	}
	for _, in := range []string{"512x", "1.5g", "0", "-1m", "m", "512mb", "1MiB", " 512m", "99999999999999999999g"} {
		if s, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, s.Bytes())
		}
	}
}

func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{512 << 20: "512m", 1 << 30: "1g", 3 << 10: "3k", 1000: "1000", 0: ""} {
		s := SizeOf(n)
		if s.String() != want {
			t.Errorf("SizeOf(%d) = %q, want %q", n, s, want)
		}
		raw, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Size
		if err := back.UnmarshalText(raw); err != nil || !back.Equal(s) {
			t.Errorf("round trip of %d through %q: %d, %v", n, raw, back.Bytes(), err)
		}
	}
	if SizeOf(DefaultMemoryBytes).String() != DefaultMemoryLimit || SizeOf(TmpBytes).String() != TmpSize {
		t.Errorf("the text constants disagree with their numbers: %s %s", SizeOf(DefaultMemoryBytes), SizeOf(TmpBytes))
	}
	if MemoryOrDefault(Size{}).Bytes() != DefaultMemoryBytes {
		t.Error("an unset memory limit is not the default")
	}
}

func TestParseUserSpec(t *testing.T) {
	for in, want := range map[string]User{"3000": {3000, 3000}, "3000:4000": {3000, 4000}, "65534:65534": {65534, 65534}} {
		got, err := ParseUserSpec(in)
		if err != nil || got.User() != want || got.String() != in {
			t.Errorf("ParseUserSpec(%q) = %v (%q), %v; want %v", in, got.User(), got, err, want)
		}
		var back UserSpec
		raw, _ := got.MarshalText()
		if err := back.UnmarshalText(raw); err != nil || back != got {
			t.Errorf("round trip of %q: %v, %v", in, back, err)
		}
	}
	if u, err := ParseUserSpec(""); err != nil || !u.IsZero() {
		t.Errorf("empty user: %v, %v; want unset", u, err)
	}
	for _, in := range []string{"0", "0:0", "1000:0", "nobody", "1000:", ":1000", "99999999999"} {
		if u, err := ParseUserSpec(in); err == nil {
			t.Errorf("ParseUserSpec(%q) = %v, want an error", in, u)
		}
	}
}

// oldConfig is a config file as the previous release wrote it, where the
// typed values were strings.
const oldConfig = `{
  "agent_id": "a1",
  "workspace": "/srv/a1",
  "listen": "unix:///run/a1.sock",
  "token": "t",
  "container_mode": {
    "enabled": true,
    "image": "img:1",
    "memory_limit": "1G",
    "timeout_seconds": 300,
    "pids_limit": 256,
    "user": "3000",
    "dns": ["10.213.1.127", "fd00::0001"],
    "prestart": true
  },
  "file_access": {},
  "llm": {"provider": "offline"},
  "inject_credentials_env": false,
  "inject_secrets_env": false,
  "redact_secrets": true,
  "llm_limits": {}
}`

// TestOldConfigReadsTyped reads a config in the previous release's form:
// the sizes and the user come out typed, and writing the config back gives
// the same JSON values (so its hash does not change with the upgrade).
func TestOldConfigReadsTyped(t *testing.T) {
	c, err := ParseConfig([]byte(oldConfig))
	if err != nil {
		t.Fatal(err)
	}
	if c.Container.MemoryLimit.Bytes() != 1<<30 || c.Container.User.User() != (User{3000, 3000}) {
		t.Fatalf("memory %d, user %v", c.Container.MemoryLimit.Bytes(), c.Container.User.User())
	}
	if dns := c.Container.DNS; len(dns) != 2 || dns[0].Addr() != netip.MustParseAddr("10.213.1.127") || dns[1].Addr() != netip.MustParseAddr("fd00::1") {
		t.Fatalf("dns %v", dns)
	}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(oldConfig), &want); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"memory_limit", "user", "dns"} {
		g, w := got["container_mode"].(map[string]any)[k], want["container_mode"].(map[string]any)[k]
		if fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("container_mode.%s written back as %#v, the old file has %#v", k, g, w)
		}
	}
	// An unset user stays out of the file, an unset memory limit is "", as before.
	raw, _ = json.Marshal(ContainerMode{})
	if s := string(raw); !strings.Contains(s, `"memory_limit":""`) || strings.Contains(s, `"user"`) {
		t.Errorf("zero container mode: %s", raw)
	}
}

// TestLoadRefusesBadSize: a config whose size does not parse is refused by
// the runner's load, naming the field, rather than read as the default.
func TestLoadRefusesBadSize(t *testing.T) {
	for field, old := range map[string]string{
		"container_mode.memory_limit": `"memory_limit": "1G"`,
		"container_mode.user":         `"user": "3000"`,
		"container_mode.dns":          `"dns": ["10.213.1.127", "fd00::0001"]`,
	} {
		bads := []string{`"lots"`, `"0"`, `512`}
		if field == "container_mode.dns" {
			bads = []string{`["sink"]`, `["10.213.1.127", ""]`, `["fe80::1%eth0"]`, `[1]`}
		}
		for _, bad := range bads {
			raw := strings.Replace(oldConfig, old, strings.SplitN(old, ":", 2)[0]+": "+bad, 1)
			path := filepath.Join(t.TempDir(), "config.json")
			if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(path)
			var fe *fault.FieldError
			if !errors.As(err, &fe) || fe.Field != field {
				t.Errorf("%s = %s: got %v, want a fault.FieldError on %s", field, bad, err, field)
				continue
			}
			if !strings.Contains(err.Error(), field+": ") {
				t.Errorf("%s = %s: %q does not name the field", field, bad, err)
			}
		}
	}
}
