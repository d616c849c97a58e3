# A fleet from a module: one image, one ThreeGate topology, and the
# agents of every role from modules/agent-fleet with for_each. One
# `terraform apply` makes it all, the core agent included, though it asks
# agents applied beside it.
#
# Run it after `make demo` has built the quickstart's base image:
#   cd examples/fleet && terraform init && terraform apply
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

resource "meepa_isolation_image" "fleet" {
  base_image      = var.base_image
  pull            = "never"
  package_manager = "none"
}

# threegate_* resources belong to the meepa provider too: name it, since
# their type prefix is not "meepa".
resource "threegate_network" "fleet" {
  provider = meepa
  name     = "fleet-tg"
  proxy = {
    image = meepa_isolation_image.fleet.isolated_image
    allow = ["api.openai.com", "api.anthropic.com"]
  }
}

module "fleet" {
  source = "./modules/agent-fleet"

  topology = threegate_network.fleet.id
  image    = meepa_isolation_image.fleet.isolated_image
  prefix   = "fleet"
  agents = {
    web  = { role = "fetch" }
    exec = { role = "tool_exec" }
    lead = { role = "core", soul = "You lead. Ask exec to run things and web to read pages.", ask = ["exec", "web"] }
  }
}

output "agent_ids" {
  value = module.fleet.agent_ids
}
