package provider

import (
	"context"
	"os"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
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

func TestDockerHostValidator(t *testing.T) {
	for in, wantErr := range map[string]bool{
		"unix:///var/run/docker.sock": false,
		"tcp://10.0.0.2:2376":         false,
		"unix:/var/run/docker.sock":   true, // one slash: no "://"
		"/var/run/docker.sock":        true,
		"ssh://me@host":               true, // needs the CLI's helper
		"tcp://":                      true,
		"http//host:2375":             true,
	} {
		var resp validator.StringResponse
		dockerHost().ValidateString(context.Background(), validator.StringRequest{
			Path: path.Root("docker_host"), ConfigValue: types.StringValue(in),
		}, &resp)
		if got := resp.Diagnostics.HasError(); got != wantErr {
			t.Errorf("%q: error = %v, want %v (%v)", in, got, wantErr, resp.Diagnostics)
			continue
		}
		if wantErr && resp.Diagnostics[0].Summary() != "Invalid Docker Host" {
			t.Errorf("%q: summary %q", in, resp.Diagnostics[0].Summary())
		}
	}
}
