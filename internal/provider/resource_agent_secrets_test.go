package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// TestAgent_secretsStayOutOfToolsByDefault: an agent that says nothing
// about inject_secrets_env plans it false, and the names of secrets it
// binds to nothing need not be environment variable names, since no tool
// sees them; asking for the export is refused and points to
// secret_bindings. Plan only: no daemon is asked.
func TestAgent_secretsStayOutOfToolsByDefault(t *testing.T) {
	stateDir := t.TempDir()
	cfg := func(extra string) string {
		return fmt.Sprintf(`
provider "meepa" {
  state_dir   = %[1]q
  docker_host = "unix://%[1]s/no-daemon.sock"
}

resource "meepa_agent" "a" {
  agent_id = "tf-acc-secrets-default"
  llm      = { provider = "offline" }
  runner   = { deployment = "external", image = "unused:1" }
  secrets  = { "db-password" = "hunter2-db-pass" }
  %[2]s
}
`, stateDir, extra)
	}
	resource.UnitTest(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: cfg(""), PlanOnly: true, ExpectNonEmptyPlan: true,
			ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPreRefresh: []plancheck.PlanCheck{
				plancheck.ExpectKnownValue("meepa_agent.a", tfjsonpath.New("inject_secrets_env"), knownvalue.Bool(false)),
			}},
		}, {
			Config: cfg("inject_secrets_env = true"), PlanOnly: true,
			ExpectError: regexp.MustCompile(`Secrets Stay Out Of Sandboxes[\s\S]*secret_bindings`),
		}},
	})
}

// TestAgent_boundHostsInsideTheCeiling: a secret bound to a host the
// fetch agent can never reach (outside its topology's allow list, or
// outside its own egress.allow) fails the plan on secret_bindings, with
// the function the runner's apply runs; a host inside plans. No daemon:
// the topology is the one this plan makes (its plan reads the
// daemon's networks when one runs).
func TestAgent_boundHostsInsideTheCeiling(t *testing.T) {
	t.Setenv("TF_ACC_PROVIDER_NAMESPACE", "bogpad")
	stateDir := t.TempDir()
	cfg := func(hosts, egress string) string {
		return fmt.Sprintf(`
terraform {
  required_providers {
    meepa = { source = "bogpad/meepa" }
  }
}

provider "meepa" {
  state_dir = %[1]q
}

resource "threegate_network" "tg" {
  provider         = meepa
  name             = "tg-bound"
  llmnet_subnet    = "10.214.10.0/24"
  fetchnet_subnet  = "10.214.11.0/24"
  egressnet_subnet = "10.214.12.0/24"
  proxy = {
    image = "img:1"
    allow = ["api.example.com", "*.docs.example.com"]
  }
}

resource "meepa_agent" "fetch" {
  agent_id       = "tf-bound-fetch"
  llm            = { provider = "offline" }
  container_mode = { enabled = true, image = "img:1" }
  threegate      = { network = threegate_network.tg.name, role = "fetch" }
  secrets        = { API_TOKEN = "s3cret" }
  secret_bindings = {
    API_TOKEN = { hosts = %[2]s, scheme = "Bearer" }
  }
  %[3]s
}
`, stateDir, hosts, egress)
	}
	step := func(c, want string) resource.TestStep {
		s := resource.TestStep{Config: c, PlanOnly: true, ExpectNonEmptyPlan: true}
		if want != "" {
			s.ExpectError = regexp.MustCompile(strings.ReplaceAll(want, " ", `\s+`))
		}
		return s
	}
	resource.UnitTest(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			step(cfg(`["evil.example.net"]`, ""),
				`Secret Bound To An Unreachable Host[\s\S]*secret_bindings\["API_TOKEN"\][\s\S]*evil.example.net:443 is not inside the topology's allow list`),
			step(cfg(`["a.docs.example.com"]`, `egress = { allow = ["api.example.com"] }`),
				`a.docs.example.com:443 is not inside the agent's egress allow list`),
			step(cfg(`["api.example.com", "x.docs.example.com"]`, ""), ""),
		},
	})
}

func TestBindingWidening(t *testing.T) {
	b := func(how string, hosts ...string) agentspec.SecretBinding {
		s := agentspec.SecretBinding{Hosts: hosts}
		switch how {
		case "bearer":
			s.Scheme = "Bearer"
		case "basic":
			s.BasicUser = "bot"
		}
		return s
	}
	base := map[string]agentspec.SecretBinding{"T": b("bearer", "api.example.com", "*.example.org")}
	for _, tc := range []struct {
		name string
		to   map[string]agentspec.SecretBinding
		want []string
	}{
		{"same", base, nil},
		{"narrower", map[string]agentspec.SecretBinding{"T": b("bearer", "api.example.com", "a.example.org")}, nil},
		{"dropped", nil, nil},
		{"host added", map[string]agentspec.SecretBinding{"T": b("bearer", "api.example.com", "api.example.net")}, []string{"T may be sent to api.example.net:443 (Authorization: Bearer)"}},
		{"other form", map[string]agentspec.SecretBinding{"T": b("basic", "api.example.com")}, []string{"api.example.com:443 (Authorization: basic auth for user bot)"}},
		{"new secret", map[string]agentspec.SecretBinding{"T": base["T"], "U": b("", "u.example.com:8443")}, []string{"U may be sent to u.example.com:8443 (Authorization)"}},
	} {
		wantLines(t, tc.name, bindingWidening(base, tc.to), tc.want)
	}
}
