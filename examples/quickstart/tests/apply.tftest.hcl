# The real thing, run by `make testacc` (TestAccQuickstartModuleTest): the
# quickstart applied on this host's daemon with the real provider, checked,
# and destroyed by `terraform test` at the end. The caller passes
# base_image, agent_prefix and topology_name so it never meets a demo.

run "apply" {
  assert {
    condition     = meepa_isolation_image.agents.image == "meepa-sandbox:${meepa_isolation_image.agents.content_hash}"
    error_message = "the container image is tagged by its content hash"
  }
  assert {
    condition     = meepa_isolation_image.agents.isolated_image == provider::meepa::isolated_image(meepa_isolation_image.agents.image)
    error_message = "the isolation image's tag is the one provider::meepa::isolated_image gives"
  }
  assert {
    condition     = output.core_networks == tolist(["${var.topology_name}-llmnet"])
    error_message = "CORE joins llmnet and nothing else"
  }
  assert {
    condition     = alltrue([for e in [output.helper_endpoint, output.core_endpoint] : startswith(e, "unix:///")])
    error_message = "runners listen on unix sockets by default"
  }
  assert {
    condition     = length(nonsensitive(output.core_token)) == 64
    error_message = "the runner's token is 32 random bytes in hex"
  }
}

run "second_plan_keeps_everything" {
  command = plan
  assert {
    condition     = meepa_agent.core.token == run.apply.core_token && meepa_isolation_image.agents.isolated_image == run.apply.isolated_image
    error_message = "a plan with the same configuration changes neither the token nor the image"
  }
}
