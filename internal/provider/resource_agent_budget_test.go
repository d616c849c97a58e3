package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
)

// A token limit out of range, or a budget below the one it holds, is a
// plan-time error on its attribute, from the runner's own check.
func TestAgent_invalidTokenBudget(t *testing.T) {
	stateDir := t.TempDir()
	for _, tc := range []struct{ name, llm, attr, want string }{
		{"per-call cap zero", `max_tokens_per_call = 0`, "llm.max_tokens_per_call", `between 1 and 1000000`},
		{"per-call cap huge", `max_tokens_per_call = 2000000`, "llm.max_tokens_per_call", `Invalid Token Limit`},
		{"message budget negative", `message_token_budget = -1`, "llm.message_token_budget", `Invalid Token Budget`},
		{"message budget below the per-call cap", `message_token_budget = 100`, "llm.message_token_budget", `below max_tokens_per_call`},
		{"agent budget below the message budget", `agent_token_budget = 1000, message_token_budget = 20000`, "llm.agent_token_budget", `below message_token_budget`},
		{"window too short", `agent_budget_window_seconds = 10`, "llm.agent_budget_window_seconds", `Invalid Budget Window`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resource.UnitTest(t, resource.TestCase{
				TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
				ProtoV6ProviderFactories: testAccProviders,
				Steps: []resource.TestStep{{
					Config:      agentConfigWith(stateDir, `llm = { provider = "openai", model = "m", `+tc.llm+` }`),
					PlanOnly:    true,
					ExpectError: errorOn(tc.attr, tc.want),
				}},
			})
		})
	}
}
