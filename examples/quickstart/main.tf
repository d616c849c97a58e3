# The quickstart: one isolation image built from a base image made on this
# machine (scripts/demo.sh builds it FROM scratch with a static busybox, so
# nothing is pulled). Run it with `make demo`.
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
