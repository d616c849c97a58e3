# The quickstart: an isolation image built from a base image made on this
# machine (scripts/demo.sh builds it FROM scratch with a static busybox, so
# nothing is pulled), a ThreeGate topology, and three agents on the embedded
# offline provider (no API key, no network needed):
#   - "helper": container mode, one fresh hardened container per message,
#     no network;
#   - "exec":   the ThreeGate TOOL-EXEC role: the only one with a shell, and
#     its commands run with no network at all;
#   - "core":   the ThreeGate CORE role: no shell and no fetch; it thinks,
#     and asks "exec" to run things (through the runners, never over a
#     network path from a sandbox).
# Run it with `make demo`; `./scripts/demo.sh down` removes it all.
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

# The base has no package manager, so the container image only adds env
# vars; with a Debian or Alpine base, list packages here.
resource "meepa_isolation_image" "agents" {
  base_image      = var.base_image
  pull            = "never"
  package_manager = "none"

  env_vars = {
    LANG        = "C.UTF-8"
    MEEPA_STAGE = "quickstart"
  }
}

variable "agent_prefix" {
  description = "Prefix of the agent ids (<prefix>-helper, -exec, -core)."
  type        = string
  default     = "qs"
}

variable "topology_name" {
  description = "Prefix of the ThreeGate networks and proxy."
  type        = string
  default     = "qs-threegate"
}

# The ThreeGate topology: llmnet and fetchnet (internal), egressnet, the
# egress proxy (agent-runner proxy from the isolation image) and the host
# firewall that enforces it.
resource "threegate_network" "tg" {
  provider = meepa
  name     = var.topology_name
  proxy = {
    image = meepa_isolation_image.agents.isolated_image
    allow = ["api.openai.com", "api.anthropic.com"]
  }
}

# An agent in container mode: every message runs in a fresh container with a
# read-only rootfs, no capabilities, 256m of memory and no network.
resource "meepa_agent" "helper" {
  agent_id = "${var.agent_prefix}-helper"
  # A demo cleans up after itself; real agents keep their workspace on
  # destroy (the default, false).
  force_destroy_workspace = true
  soul                    = "You are the quickstart helper. Be brief."
  memory                  = "Nothing remembered yet."
  llm                     = { provider = "offline" }
  container_mode = {
    enabled      = true
    image        = meepa_isolation_image.agents.isolated_image
    memory_limit = "256m"
    network      = "none"
  }
}

# TOOL-EXEC: shell and file tools; every message's container has no network
# (its LLM calls, with a real provider, go through the runner's relay).
resource "meepa_agent" "exec" {
  agent_id                = "${var.agent_prefix}-exec"
  force_destroy_workspace = true
  soul                    = "You are TOOL-EXEC. You run what CORE asks, offline."
  llm                     = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = meepa_isolation_image.agents.isolated_image
  }
  threegate = {
    network = threegate_network.tg.id
    role    = "tool_exec"
  }
}

# The CORE of ThreeGate: the component most exposed to hostile prompts, so
# it has no route to the internet and cannot reach the proxy; an LLM gateway
# on llmnet would answer it (here the offline provider stands in).
resource "meepa_agent" "core" {
  agent_id                = "${var.agent_prefix}-core"
  force_destroy_workspace = true
  soul                    = "You are CORE. You never browse; FETCH does that."
  llm                     = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = meepa_isolation_image.agents.isolated_image
  }
  threegate = {
    network = threegate_network.tg.id
    role    = "core"
    ask     = [meepa_agent.exec.agent_id]
  }
}

output "helper_endpoint" {
  value = meepa_agent.helper.endpoint
}

output "helper_token" {
  value     = meepa_agent.helper.token
  sensitive = true
}

output "core_endpoint" {
  value = meepa_agent.core.endpoint
}

output "core_token" {
  value     = meepa_agent.core.token
  sensitive = true
}

output "core_networks" {
  description = "What the CORE role joins, as threegate_network computes it."
  value       = threegate_network.tg.roles["CORE"].networks
}

output "proxy_url" {
  value = threegate_network.tg.proxy_url
}

output "workspaces" {
  value = [meepa_agent.helper.workspace_path, meepa_agent.exec.workspace_path, meepa_agent.core.workspace_path]
}

output "image" {
  description = "The container image (base plus env vars)."
  value       = meepa_isolation_image.agents.image
}

output "isolated_image" {
  description = "The isolation image: the container image plus agent-runner."
  value       = meepa_isolation_image.agents.isolated_image
}

output "runner_version" {
  value = meepa_isolation_image.agents.runner_version
}

output "dockerfile" {
  value = meepa_isolation_image.agents.dockerfile
}
