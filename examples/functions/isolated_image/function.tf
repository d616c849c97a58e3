# The isolation image an agent will run, known at plan: here the tag of an
# operator's own image used as it is (no packages, no env vars).
locals {
  agent_image = provider::meepa::isolated_image("registry.internal:5000/team/agent-base:2026.11")
}

output "agent_image" {
  value = local.agent_image
}
