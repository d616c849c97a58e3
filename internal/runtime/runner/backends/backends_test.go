package backends

import (
	"slices"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

func TestProtectedPaths(t *testing.T) {
	if got := protectedPaths("/s/runners/a1/config.json", "/s/runners/a1/journal"); !slices.Equal(got, []string{"/s/runners/a1/journal", "/s/runners/a1/config.json", "/s/runners"}) {
		t.Errorf("provider layout: %q", got)
	}
	if got := protectedPaths("/etc/meepa/a1.json", "/var/lib/meepa/a1"); !slices.Equal(got, []string{"/var/lib/meepa/a1", "/etc/meepa/a1.json"}) {
		t.Errorf("external layout: %q", got)
	}
	if got := protectedPaths("", ""); got != nil {
		t.Errorf("no path: %q", got)
	}
	if o := HostOptions(&agentspec.Config{Path: "/s/runners/a1/config.json"}, nil); !slices.Contains(o.Protect, "/s/runners") {
		t.Errorf("HostOptions.Protect = %q", o.Protect)
	}

}
