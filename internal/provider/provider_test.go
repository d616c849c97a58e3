package provider

import (
	"os"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// testAccProviders serves the provider in-process to the real terraform CLI.
var testAccProviders = map[string]func() (tfprotov6.ProviderServer, error){
	"meepa": providerserver.NewProtocol6WithError(New("0.1.0-test")()),
}

// testAccPreCheck makes sure what acceptance tests need is there: the
// daemon answers and an agent-runner binary is built (MEEPA_AGENT_RUNNER
// points at it, so the provider under test finds it).
func testAccPreCheck(t *testing.T) {
	t.Helper()
	testutil.Docker(t)
	if os.Getenv("MEEPA_AGENT_RUNNER") == "" {
		t.Setenv("MEEPA_AGENT_RUNNER", testutil.RunnerBinary(t))
	}
}
