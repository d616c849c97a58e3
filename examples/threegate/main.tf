# ThreeGate at the execution layer: three agents in one topology, each doing
# only what its gate allows, on the embedded offline provider (no API key;
# swap in llm = { provider = "openai", ... } for a model — the key then
# stays with each agent's runner, which relays the model calls).
#
#   - "te"    (TOOL-EXEC): the shell and the file tools; every command runs
#             in a container with no network at all;
#   - "fetch" (FETCH):     fetch (HTTP(S) GET through the topology's proxy,
#             allow-listed hosts only) and the file tools; no shell;
#   - "core"  (CORE):      the file tools and ask; no shell, no fetch. It asks
#             "te" to compute and "fetch" to read a page, through the
#             runners, never over a network path from its sandbox.
#
# Try it (the endpoints and tokens are outputs):
#   curl --unix-socket <core socket> -H "Authorization: Bearer <token>" \
#     -d '{"text":"!ask tg-te !sh echo $((6*7))"}' http://core/v1/messages
#   ... -d '{"text":"!ask tg-fetch !fetch https://example.com/"}' ...
#   ... -d '{"text":"!sh id"}'   # refused: CORE has no shell
terraform {
  required_providers {
    meepa = {
      source = "bogpad/meepa"
    }
  }
}

provider "meepa" {}

variable "base_image" {
  description = "Local base image for the agents' containers."
  type        = string
  default     = "meepa-quickstart/base:latest"
}

resource "meepa_isolation_image" "agents" {
  base_image      = var.base_image
  pull            = "never"
  package_manager = "none"
}

resource "threegate_network" "tg" {
  provider = meepa
  name     = "tg-example"
  proxy = {
    image = meepa_isolation_image.agents.isolated_image
    allow = ["example.com"]
  }
}

resource "meepa_agent" "te" {
  agent_id = "tg-te"
  llm      = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = meepa_isolation_image.agents.isolated_image
  }
  threegate = {
    network = threegate_network.tg.id
    role    = "tool_exec"
  }
}

resource "meepa_agent" "fetch" {
  agent_id = "tg-fetch"
  llm      = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = meepa_isolation_image.agents.isolated_image
  }
  threegate = {
    network = threegate_network.tg.id
    role    = "fetch"
  }
}

resource "meepa_agent" "core" {
  agent_id = "tg-core"
  llm      = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = meepa_isolation_image.agents.isolated_image
  }
  threegate = {
    network = threegate_network.tg.id
    role    = "core"
    # The gates CORE may ask; referencing them applies them first.
    ask = [meepa_agent.te.agent_id, meepa_agent.fetch.agent_id]
  }
}

output "core_endpoint" {
  value = meepa_agent.core.endpoint
}

output "core_token" {
  value     = meepa_agent.core.token
  sensitive = true
}
