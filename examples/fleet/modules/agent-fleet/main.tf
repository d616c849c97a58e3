# A fleet of agents in one ThreeGate topology, one meepa_agent per entry
# of var.agents (for_each). A core entry asks the others by their key;
# nothing references another instance, so Terraform applies them side by
# side: the provider checks the asks at plan and a core agent's apply
# waits for the agents it asks.
#
# A module names the providers it uses itself: without this block
# Terraform looks for hashicorp/meepa.
terraform {
  required_providers {
    meepa = {
      source = "bogpad/meepa"
    }
  }
}

variable "topology" {
  description = "The threegate_network the agents join (its id)."
  type        = string
}

variable "image" {
  description = "The image of every message's container (an isolated_image)."
  type        = string
}

variable "prefix" {
  description = "Prefix of the agents' agent_id; each is <prefix>-<key>."
  type        = string
}

variable "agents" {
  description = "The agents by key: role (core, fetch or tool_exec), an optional soul, and for a core agent the keys it asks."
  type = map(object({
    role = string
    soul = optional(string)
    ask  = optional(list(string), [])
  }))
}

resource "meepa_agent" "this" {
  for_each = var.agents

  agent_id = "${var.prefix}-${each.key}"
  soul     = each.value.soul
  llm      = { provider = "offline" }
  container_mode = {
    enabled = true
    image   = var.image
  }
  threegate = {
    network = var.topology
    role    = each.value.role
    ask     = length(each.value.ask) > 0 ? [for k in each.value.ask : "${var.prefix}-${k}"] : null
  }
  # An example removes its workspaces on destroy; real agents keep them.
  force_destroy_workspace = true
}

output "agent_ids" {
  description = "The agents' agent_id by key."
  value       = { for k, a in meepa_agent.this : k => a.agent_id }
}
