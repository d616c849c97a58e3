package provider

import (
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

func TestPolicyWidening(t *testing.T) {
	pol := func(allow, deny, cidrs []string) proxy.Policy {
		p, errs := proxy.ParsePolicy(allow, deny, cidrs)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return p
	}
	base := pol([]string{"a.example.com"}, []string{"x.example.com"}, []string{"8.8.8.0/24"})
	for _, tc := range []struct {
		name string
		to   proxy.Policy
		want []string
	}{
		{"same", base, nil},
		{"narrower", pol([]string{"a.example.com"}, []string{"x.example.com", "y.example.com"}, []string{"8.8.8.0/25"}), nil},
		{"allow added", pol([]string{"a.example.com", "b.example.com"}, []string{"x.example.com"}, []string{"8.8.8.0/24"}), []string{"may reach b.example.com:443"}},
		{"allow dropped", pol(nil, []string{"x.example.com"}, []string{"8.8.8.0/24"}), []string{"whole allow list"}},
		{"deny dropped", pol([]string{"a.example.com"}, nil, []string{"8.8.8.0/24"}), []string{"x.example.com:443 is no longer denied"}},
		{"cidrs dropped", pol([]string{"a.example.com"}, []string{"x.example.com"}, nil), []string{"no longer confined"}},
		{"cidr added", pol([]string{"a.example.com"}, []string{"x.example.com"}, []string{"8.8.8.0/24", "1.1.1.0/24"}), []string{"addresses in 1.1.1.0/24"}},
	} {
		wantLines(t, tc.name, policyWidening(base, tc.to), tc.want)
	}
}

// wantLines checks that got has as many lines as want, each holding the
// want of its place.
func wantLines(t *testing.T, name string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %q, want %d lines like %q", name, got, len(want), want)
		return
	}
	for i := range got {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("%s: %q, want %q", name, got[i], want[i])
		}
	}
}
