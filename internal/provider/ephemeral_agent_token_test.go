package provider

import (
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/echoprovider"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccAgentToken: a short-lived token from meepa_agent_token (handed
// out through the echo provider, as a module would hand it on) is taken by
// the runner, is not the long-lived token, and ends with token_version.
func TestAccAgentToken(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	stateDir := t.TempDir()
	id := "tf-acc-agent-token-" + runID
	layout := deploy.LayoutFor(stateDir, id)
	cleanupAgent(t, cli, id)
	providers := withEcho()
	// The agent, a short-lived token of it, and the echo that keeps it.
	withToken := func(version, ttl string) string {
		return agentAccConfig(stateDir, id, image, "256m", "token_version = "+version) + fmt.Sprintf(`
ephemeral "meepa_agent_token" "t" {
  agent_id    = meepa_agent.t.agent_id
  ttl_seconds = %s
}

provider "echo" {
  data = ephemeral.meepa_agent_token.t
}

resource "echo" "t" {}
`, ttl)
	}
	var short string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: providers,
		Steps: []resource.TestStep{
			// The agent first: a token is made from what its runner holds.
			{Config: agentAccConfig(stateDir, id, image, "256m", "token_version = 0")},
			{
				Config: withToken("0", "600"),
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["echo.t"].Primary.Attributes
					short = a["data.token"]
					long := s.RootModule().Resources["meepa_agent.t"].Primary.Attributes["token"]
					if short == "" || short == long || !regexp.MustCompile(`^mst1\.`+regexp.QuoteMeta(id)+`\.\d+\.[0-9a-f]{64}$`).MatchString(short) {
						return fmt.Errorf("short-lived token %q (the long one is %d characters)", short, len(long))
					}
					exp, err := time.Parse(time.RFC3339, a["data.expires_at"])
					if err != nil || time.Until(exp) > 600*time.Second || time.Until(exp) < 500*time.Second {
						return fmt.Errorf("expires_at %q %v, want about 600 s from now", a["data.expires_at"], err)
					}
					reply, code, err := sendMessage(layout.Socket, short, "short")
					if err != nil || code != 200 || reply.Reply != agent.OfflineAnswer("short") {
						return fmt.Errorf("message with the short-lived token: %d %v %+v", code, err, reply)
					}
					return nil
				},
			},
			{
				// A new token_version ends the short-lived tokens made
				// from the old token.
				Config: agentAccConfig(stateDir, id, image, "256m", "token_version = 1"),
				Check: func(*terraform.State) error {
					if _, code, err := sendMessage(layout.Socket, short, "stale"); err != nil || code != http.StatusUnauthorized {
						return fmt.Errorf("a short-lived token of the old token after rotation: %d %v, want 401", code, err)
					}
					return nil
				},
			},
		},
	})
}

// withEcho is the provider under test and the echo provider, which keeps
// an ephemeral value in state for a test to read.
func withEcho() map[string]func() (tfprotov6.ProviderServer, error) {
	providers := map[string]func() (tfprotov6.ProviderServer, error){"echo": echoprovider.NewProviderServer()}
	maps.Copy(providers, testAccProviders)
	return providers
}

// echoShortToken is a meepa_agent_token of agent addr's agent_id, kept by
// the echo provider as echo.t.
func echoShortToken(addr string) string {
	return fmt.Sprintf(`
ephemeral "meepa_agent_token" "t" {
  agent_id = %s.agent_id
}

provider "echo" {
  data = ephemeral.meepa_agent_token.t
}

resource "echo" "t" {}
`, addr)
}

// TestAgentToken_invalidInput: a bad id or lifetime is refused before
// anything is read.
func TestAgentToken_invalidInput(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`agent_id = "A B"`, `Invalid Agent ID`},
		{"agent_id = \"core\"\n  ttl_seconds = 0", `Invalid Token Lifetime(.|\n)*0 is not between 1 and 86400`},
		{"agent_id = \"core\"\n  ttl_seconds = 86401", `Invalid Token Lifetime`},
	} {
		resource.UnitTest(t, resource.TestCase{
			TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
			ProtoV6ProviderFactories: testAccProviders,
			Steps: []resource.TestStep{{
				Config:      "provider \"meepa\" {\n  state_dir = \"" + t.TempDir() + "\"\n}\n\nephemeral \"meepa_agent_token\" \"t\" {\n  " + c.body + "\n}\n",
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(c.want),
			}},
		})
	}
}
