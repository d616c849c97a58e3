# Plan-only, no daemon: the quickstart's wiring, with a mock of the
# provider (its real schema, no API calls). `make test` runs it; the real
# apply is in apply.tftest.hcl, run by `make testacc`.
mock_provider "meepa" {
  override_during = plan
  mock_resource "meepa_isolation_image" {
    defaults = {
      isolated_image = "meepagateway-isolated:0.1.0-mock-meepa-sandbox-000000000000"
    }
  }
  mock_resource "threegate_network" {
    defaults = {
      id = "qs-threegate"
      roles = {
        CORE      = { networks = ["qs-threegate-llmnet"], env = {}, sandbox_network = "none" }
        FETCH     = { networks = ["qs-threegate-fetchnet"], env = {}, sandbox_network = "qs-threegate-fetchnet" }
        TOOL_EXEC = { networks = [], env = {}, sandbox_network = "none" }
      }
    }
  }
}

run "every_agent_runs_the_isolation_image" {
  command = plan

  assert {
    condition = alltrue([for a in [meepa_agent.helper, meepa_agent.exec, meepa_agent.core] :
    a.container_mode.image == meepa_isolation_image.agents.isolated_image && a.container_mode.enabled])
    error_message = "every quickstart agent runs a fresh container of the isolation image per message"
  }
  assert {
    condition     = threegate_network.tg.proxy.image == meepa_isolation_image.agents.isolated_image
    error_message = "the egress proxy runs agent-runner from the isolation image"
  }
}

run "threegate_roles_and_asks" {
  command = plan

  assert {
    condition     = meepa_agent.core.threegate.role == "core" && meepa_agent.exec.threegate.role == "tool_exec"
    error_message = "core is CORE and exec is TOOL-EXEC"
  }
  assert {
    condition     = meepa_agent.core.threegate.ask == tolist([meepa_agent.exec.agent_id])
    error_message = "core asks exec, and only exec"
  }
  assert {
    condition     = meepa_agent.helper.container_mode.network == "none" && meepa_agent.helper.threegate == null
    error_message = "the helper has no network and no role"
  }
  assert {
    condition     = alltrue([for a in [meepa_agent.exec, meepa_agent.core] : a.threegate.network == threegate_network.tg.id])
    error_message = "both ThreeGate agents sit on the quickstart's topology"
  }
}

run "only_llm_hosts_are_allowed" {
  command = plan

  assert {
    condition     = provider::meepa::allowlist(threegate_network.tg.proxy.allow) == tolist(["api.openai.com:443", "api.anthropic.com:443"])
    error_message = "the proxy lets out only the two LLM APIs"
  }
}

run "a_topology_name_of_the_callers_choice" {
  command = plan
  variables {
    topology_name = "ci-tg"
  }
  assert {
    condition     = threegate_network.tg.name == "ci-tg"
    error_message = "topology_name names the topology"
  }
}
