package firewall

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestOpenWithoutIptables(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Open(context.Background())
	if !errors.Is(err, ErrNoIptables) || !strings.Contains(err.Error(), "firewall.enabled = false") {
		t.Fatalf("Open without iptables = %v, want ErrNoIptables with advice", err)
	}
}
