# Plan-only, no cluster and no daemon: the example's wiring, with a mock of
# the provider (its real schema, no API calls). `make test` runs it.
mock_provider "meepa" {
  override_during = plan
  mock_resource "meepa_isolation_image" {
    defaults = {
      isolated_image = "registry.test:5000/meepagateway-isolated:0.1.0-mock-debian-bookworm-slim"
    }
  }
  mock_resource "threegate_network" {
    defaults = {
      id = "k8s-tg"
    }
  }
}

variables {
  registry = "registry.test:5000"
}

run "agents_and_proxy_run_the_pushed_image" {
  command = plan

  assert {
    condition = alltrue([for a in [meepa_agent.exec, meepa_agent.fetch, meepa_agent.core] :
    a.container_mode.image == meepa_isolation_image.agents.isolated_image && a.container_mode.enabled])
    error_message = "every message pod runs the isolation image the nodes pull"
  }
  assert {
    condition     = threegate_network.tg.proxy.image == meepa_isolation_image.agents.isolated_image
    error_message = "the proxy Deployment runs agent-runner from the same image"
  }
}

run "one_agent_per_role_and_core_asks_both" {
  command = plan

  assert {
    condition = [meepa_agent.exec.threegate.role, meepa_agent.fetch.threegate.role, meepa_agent.core.threegate.role] == [
    "tool_exec", "fetch", "core"]
    error_message = "exec, fetch and core hold the three ThreeGate roles"
  }
  assert {
    condition     = meepa_agent.core.threegate.ask == tolist(["k8s-exec", "k8s-fetch"])
    error_message = "core asks the two other agents by id"
  }
}

run "prefix_and_allow_follow_the_variables" {
  command = plan
  variables {
    prefix = "team-a"
    allow  = ["Docs.Example.com", "docs.example.com:443", "*.pkg.example.org"]
  }
  assert {
    condition     = threegate_network.tg.name == "team-a-tg" && meepa_agent.core.agent_id == "team-a-core"
    error_message = "prefix names the topology and the agents"
  }
  assert {
    condition     = provider::meepa::allowlist(threegate_network.tg.proxy.allow) == tolist(["docs.example.com:443", "*.pkg.example.org:443"])
    error_message = "the proxy enforces the allow list in its canonical form, duplicates dropped"
  }
}
