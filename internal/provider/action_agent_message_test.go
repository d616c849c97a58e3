package provider

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// needsActions: actions need Terraform 1.14; under an older CLI these
// tests skip, saying so.
var needsActions = []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_14_0)}

// messageTrigger is an action meepa_agent_message with the given config
// body, run after terraform_data.smoke (which follows the agent's config
// hash and the body) is created or changes.
func messageTrigger(body string) string {
	return fmt.Sprintf(`
action "meepa_agent_message" "smoke" {
  config {
%s
  }
}

resource "terraform_data" "smoke" {
  input = [meepa_agent.t.config_hash, %q]
  lifecycle {
    action_trigger {
      events  = [after_create, after_update]
      actions = [action.meepa_agent_message.smoke]
    }
  }
}
`, body, body)
}

// TestAccAgentMessageAction: an apply that creates an agent runs the
// action after it: the reply that matches expect passes; a bad expect
// fails at plan, before anything is sent; a reply that does not match and
// a message to an agent that is not there fail the apply with their
// reasons.
func TestAccAgentMessageAction(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	stateDir := t.TempDir()
	id := "tf-acc-msg-action-" + runID
	cleanupAgent(t, cli, id)
	agent := agentAccConfig(stateDir, id, image, "512m", "")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   needsActions,
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			{
				Config: agent + messageTrigger(`    agent_id = meepa_agent.t.agent_id
    text     = "hello"
    expect   = "^offline: received 5 characters"`),
			},
			{
				Config: agent + messageTrigger(`    agent_id = meepa_agent.t.agent_id
    text     = "hello"
    expect   = "("`),
				PlanOnly:    true,
				ExpectError: errRE(`Invalid Regular Expression`),
			},
			{
				Config: agent + messageTrigger(`    agent_id = "`+id+`"
    text     = "hello again"
    expect   = "received 5 characters"`),
				ExpectError: errRE(`Unexpected Reply.*replied to message .* with "offline: received 11 characters`),
			},
			{
				Config: agent + messageTrigger(`    agent_id = "tf-acc-nobody-`+runID+`"
    text     = "hello"`),
				ExpectError: errRE(`Agent Message Failed.*no runner config for agent "tf-acc-nobody-`),
			},
			{
				// Passing again, so the last configuration is a good one.
				Config: agent + messageTrigger(`    agent_id = meepa_agent.t.agent_id
    text     = "hello, once more"
    expect   = "received 16 characters"`),
			},
		},
	})
}
