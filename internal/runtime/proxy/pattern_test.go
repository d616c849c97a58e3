package proxy

import (
	"strings"
	"testing"
)

func TestParsePatternValid(t *testing.T) {
	tests := []struct {
		in        string
		canonical string
		wildcard  bool
		ip        bool
	}{
		{"example.com", "example.com:443", false, false},
		{"Example.COM.", "example.com:443", false, false},
		{"api.example.com:8443", "api.example.com:8443", false, false},
		{"example.com:1", "example.com:1", false, false},
		{"example.com:65535", "example.com:65535", false, false},
		{"*.example.com", "*.example.com:443", true, false},
		{"*.Example.com.:8080", "*.example.com:8080", true, false},
		{"under_score.example.com", "under_score.example.com:443", false, false},
		{"xn--bcher-kva.example", "xn--bcher-kva.example:443", false, false},
		{"1.2.3.4", "1.2.3.4:443", false, true},
		{"1.2.3.4:80", "1.2.3.4:80", false, true},
		{"[::1]", "[::1]:443", false, true},
		{"[::1]:8443", "[::1]:8443", false, true},
		{"[2001:DB8:0:0::1]:443", "[2001:db8::1]:443", false, true},
		{"[::ffff:1.2.3.4]:443", "1.2.3.4:443", false, true},
		{"localhost", "localhost:443", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p, err := ParsePattern(tt.in)
			if err != nil {
				t.Fatalf("ParsePattern(%q): %v", tt.in, err)
			}
			if got := p.String(); got != tt.canonical {
				t.Errorf("String() = %q, want %q", got, tt.canonical)
			}
			if p.Wildcard != tt.wildcard || p.IP.IsValid() != tt.ip {
				t.Errorf("wildcard=%v ip=%v, want %v %v", p.Wildcard, p.IP.IsValid(), tt.wildcard, tt.ip)
			}
			// The canonical form parses back to the same pattern.
			again, err := ParsePattern(p.String())
			if err != nil || again != p {
				t.Errorf("round trip of %q: %v, %v", p.String(), again, err)
			}
		})
	}
}

func TestParsePatternInvalid(t *testing.T) {
	tests := []struct {
		in, wantErr string
	}{
		{"", "empty"},
		{"https://example.com", "scheme"},
		{"http://example.com:443", "scheme"},
		{"example.com/", "path"},
		{"example.com/api", "path"},
		{"example.com:443/api", "path"},
		{"example.com?q=1", "query"},
		{"user@example.com", "userinfo"},
		{"user:secret@example.com:443", "userinfo"},
		{":443", "empty host"},
		{"[]:443", "empty host"},
		{"example.com:0", "port 0"},
		{"example.com:65536", "out of range"},
		{"example.com:70000", "out of range"},
		{"example.com:99999999999", "out of range"},
		{"example.com:", "empty port"},
		{"example.com:-1", "not a number"},
		{"example.com:https", "not a number"},
		{"example.com:+443", "not a number"},
		{"::1", "must be in brackets"},
		{"2001:db8::1:443", "must be in brackets"},
		{"[::1", "missing ']'"},
		{"[::1]443", "after ']'"},
		{"[1.2.3.4]:443", "not an IPv6 address"},
		{"[fe80::1%eth0]:443", "zones"},
		{"[example.com]:443", "not an IPv6 address"},
		{"*", "wildcard"},
		{"*.com", "two labels"},
		{"*.", "empty host"},
		{"a.*.example.com", "wildcard"},
		{"*example.com", "wildcard"},
		{"**.example.com", "wildcard"},
		{"example.*", "wildcard"},
		{"exa mple.com", "whitespace"},
		{" example.com", "whitespace"},
		{"example..com", "empty label"},
		{".example.com", "empty label"},
		{"example.com..", "empty label"},
		{"-bad.example.com", "starts or ends with '-'"},
		{"bücher.example", "punycode"},
		{"1.2.3.999", "looks like an IPv4"},
		{"127.1", "looks like an IPv4"},
		{strings.Repeat("a", 64) + ".example.com", "longer than 63"},
		{strings.Repeat("abcdefghi.", 26) + "com", "longer than 253"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p, err := ParsePattern(tt.in)
			if err == nil {
				t.Fatalf("ParsePattern(%q) = %v, want an error containing %q", tt.in, p, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParsePattern(%q) error %q, want it to contain %q", tt.in, err, tt.wantErr)
			}
		})
	}
}

func TestAllowlistMatch(t *testing.T) {
	list, err := ParseAllowlist([]string{
		"example.com",
		"*.wild.example:8443",
		"10.0.0.5:80",
		"[2001:db8::7]",
		"API.Upper.Example.",
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		target string
		want   bool
	}{
		{"example.com:443", true},
		{"EXAMPLE.com.:443", true},
		{"example.com:80", false},
		{"example.com:4430", false},
		{"www.example.com:443", false}, // a plain name does not cover its subdomains
		{"notexample.com:443", false},
		{"a.wild.example:8443", true},
		{"a.b.c.wild.example:8443", true},
		{"wild.example:8443", false}, // the wildcard does not cover the apex
		{"a.wild.example:443", false},
		{"xwild.example:8443", false},
		{"a.wild.example.evil.test:8443", false},
		{"10.0.0.5:80", true},
		{"10.0.0.5:443", false},
		{"10.0.0.6:80", false},
		{"[::ffff:10.0.0.5]:80", true}, // IPv4-mapped is the same address
		{"[2001:db8::7]:443", true},
		{"[2001:db8:0::7]:443", true},
		{"[2001:db8::8]:443", false},
		{"api.upper.example:443", true},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			target, err := ParseTarget(tt.target, 0)
			if err != nil {
				t.Fatalf("ParseTarget(%q): %v", tt.target, err)
			}
			if _, got := list.Match(target); got != tt.want {
				t.Errorf("Match(%s) = %v, want %v", target, got, tt.want)
			}
		})
	}
}

func TestIPPatternDoesNotMatchName(t *testing.T) {
	// An IP-literal entry is about that address as requested; a name that
	// happens to resolve there is not covered by it.
	list, err := ParseAllowlist([]string{"127.0.0.1:443"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := list.Match(Target{Host: "localhost", Port: 443}); ok {
		t.Fatal("an IP pattern matched a name")
	}
}

func TestParseTarget(t *testing.T) {
	tests := []struct {
		in          string
		defaultPort uint16
		want        string
		wantErr     string
	}{
		{"example.com:443", 0, "example.com:443", ""},
		{"example.com", 0, "", "missing port"},
		{"example.com", 80, "example.com:80", ""},
		{"[::1]:443", 0, "[::1]:443", ""},
		{"[::1]", 0, "", "missing port"},
		{"[::1]", 80, "[::1]:80", ""},
		{"::1:443", 0, "", "brackets"},
		{"example.com:0", 0, "", "port 0"},
		{"example.com:65536", 0, "", "out of range"},
		{"*.example.com:443", 0, "", "wildcard"},
		{"a@example.com:443", 0, "", "userinfo"},
		{"example.com.:443", 0, "example.com:443", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTarget(tt.in, tt.defaultPort)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseTarget(%q) = %v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTarget(%q): %v", tt.in, err)
			}
			if got.String() != tt.want {
				t.Errorf("ParseTarget(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseAllowlistReportsEveryBadEntry(t *testing.T) {
	_, err := ParseAllowlist([]string{"ok.example", "https://a.example", "fine.example:80", "b.example:0"})
	if err == nil {
		t.Fatal("want an error")
	}
	msg := err.Error()
	for _, want := range []string{"allow[1]", "scheme", "allow[3]", "port 0"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "allow[0]") || strings.Contains(msg, "allow[2]") {
		t.Errorf("error %q blames a good entry", msg)
	}

	list, err := ParseAllowlist([]string{"A.example", "a.example:443", "a.example."})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Errorf("duplicates kept: %v", list.Strings())
	}
}
