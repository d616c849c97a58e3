package runner

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// A refusal for missing enforcement is 503 not_enforced: nothing ran, and
// the sender may send again.
func TestClassifyNotEnforced(t *testing.T) {
	err := fmt.Errorf("%w: topology \"tg\" has no firewall guard", sandbox.ErrNotEnforced)
	status, kind, detail, reply := classify(&agentspec.Config{}, sandbox.Outcome{}, err)
	if status != http.StatusServiceUnavailable || kind != KindNotEnforced || reply != nil || !strings.Contains(detail, "no firewall guard") {
		t.Fatalf("classify = %d %q %q %v", status, kind, detail, reply)
	}
}
