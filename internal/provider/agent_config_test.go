// The agent configuration the acceptance tests apply, the values that must
// never leak from it, and the cleanup of what it makes.

package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// Values that must never leave the runner's 0600 config and the agent
// loop's stdin.
const (
	testAPIKey = "sk-tfacc-4c0ffee-never-leaks"
	testSecret = "tfacc-secret-9d1e-never-leaks"
	// The rotated key neither contains testAPIKey nor is contained in it,
	// so a search for one can never find the other.
	testAPIKeyRotated = "sk-tfacc-rot8d-b0a7-never-leaks"
)

func agentAccConfig(stateDir, id, image, memory string, extra string) string {
	return agentAccConfigKey(stateDir, id, image, memory, testAPIKey, extra)
}

func agentAccConfigKey(stateDir, id, image, memory, apiKey, extra string) string {
	return fmt.Sprintf(`
provider "meepa" {
  state_dir = %[1]q
}

resource "meepa_agent" "t" {
  agent_id = %[2]q
  soul     = "You are a test agent."
  memory   = "Nothing yet."
  llm = {
    provider = "offline"
    api_key  = %[5]q
  }
  secrets = { TOOL_TOKEN = %[6]q }
  container_mode = {
    enabled      = true
    image        = %[3]q
    memory_limit = %[4]q
    network      = "none"
  }
  %[7]s
}
`, stateDir, id, image, memory, apiKey, testSecret, extra)
}

// cleanupAgent removes, when t ends, what a failed test may leave: the
// runner and the agent's message containers. A removal that fails fails t.
func cleanupAgent(t *testing.T, cli client.APIClient, id string) {
	t.Helper()
	testutil.Cleanup(t, "remove agent "+id, func() error {
		return deploy.Remove(context.Background(), cli, id, time.Second)
	})
}
