# ThreeGate on a Kubernetes cluster: the quickstart's topology with the
# resources unchanged, only the provider block differs. The isolation image
# is built by the local Docker Engine and pushed to a registry the nodes
# pull from; the topology becomes NetworkPolicies and a proxy Deployment;
# each agent's runner is a Deployment and every message a fresh hardened
# Pod. On the embedded offline provider, so no key is needed:
#
#   - "exec"  (TOOL-EXEC): the shell; its pods reach nothing at all;
#   - "fetch" (FETCH):     fetch, only through the topology's proxy;
#   - "core"  (CORE):      no shell, no fetch; it asks the other two through
#                          the runners.
#
# Try it (a runner is reached through its pod; `kubectl port-forward`):
#   kubectl -n <namespace> port-forward deploy/meepa-<prefix>-core 8080 &
#   curl -H "Authorization: Bearer $(terraform output -raw core_token)" \
#     -d '{"text":"!ask <prefix>-exec !sh echo $((6*7))"}' localhost:8080/v1/messages
#
# The cluster must enforce NetworkPolicies (a CNI such as Calico, Cilium or
# kube-router): threegate_verify below fails the plan when it does not. The
# namespace should enforce the restricted Pod Security level
# (pod-security.kubernetes.io/enforce=restricted); meepa_agent warns when
# it does not.
terraform {
  required_providers {
    meepa = {
      source = "bogpad/meepa"
    }
  }
}

variable "kubeconfig" {
  description = "kubeconfig file; null follows kubectl ($KUBECONFIG, ~/.kube/config)."
  type        = string
  default     = null
}

variable "namespace" {
  description = "Namespace the agents, the proxy and the policies go to (it must exist)."
  type        = string
  default     = "meepa"
}

variable "api_server" {
  description = "host:port of the API server as pods reach it, for clusters without kube-proxy; null keeps the kubelet's."
  type        = string
  default     = null
}

variable "registry" {
  description = "host[:port][/path] of the registry the nodes pull from."
  type        = string
}

variable "registry_insecure" {
  description = "Plain HTTP to the registry (a test registry only)."
  type        = bool
  default     = false
}

variable "base_image" {
  description = "Base image of the agents' containers, on the local Docker Engine or pullable."
  type        = string
  default     = "debian:bookworm-slim"
}

variable "prefix" {
  description = "Prefix of the topology and the agent ids."
  type        = string
  default     = "k8s"
}

variable "allow" {
  description = "Hosts the proxy lets FETCH reach."
  type        = list(string)
  default     = ["example.com"]
}

variable "dns" {
  description = "Public resolvers the proxy asks (on a cluster the proxy may not ask the cluster's DNS)."
  type        = list(string)
  default     = ["9.9.9.9"]
}

provider "meepa" {
  kubernetes = {
    config_path = var.kubeconfig
    namespace   = var.namespace
    api_server  = var.api_server
  }
  registry = {
    address  = var.registry
    insecure = var.registry_insecure
  }
}

# Built on Docker, pushed to the registry; isolated_image names it there.
resource "meepa_isolation_image" "agents" {
  base_image      = var.base_image
  pull            = "missing"
  package_manager = "none"
}

# NetworkPolicies (deny by default, then exactly the ThreeGate table) and
# the egress proxy as a Deployment.
resource "threegate_network" "tg" {
  provider = meepa
  name     = "${var.prefix}-tg"
  proxy = {
    image = meepa_isolation_image.agents.isolated_image
    allow = var.allow
    dns   = var.dns
  }
}

resource "meepa_agent" "exec" {
  agent_id                = "${var.prefix}-exec"
  force_destroy_workspace = true
  llm                     = { provider = "offline" }
  container_mode          = { enabled = true, image = meepa_isolation_image.agents.isolated_image }
  threegate               = { network = threegate_network.tg.id, role = "tool_exec" }
}

resource "meepa_agent" "fetch" {
  agent_id                = "${var.prefix}-fetch"
  force_destroy_workspace = true
  llm                     = { provider = "offline" }
  container_mode          = { enabled = true, image = meepa_isolation_image.agents.isolated_image }
  threegate               = { network = threegate_network.tg.id, role = "fetch" }
}

resource "meepa_agent" "core" {
  agent_id                = "${var.prefix}-core"
  force_destroy_workspace = true
  llm                     = { provider = "offline" }
  container_mode          = { enabled = true, image = meepa_isolation_image.agents.isolated_image }
  threegate = {
    network = threegate_network.tg.id
    role    = "core"
    ask     = [meepa_agent.exec.agent_id, meepa_agent.fetch.agent_id]
  }
}

# Probe pods in every role's labels; reading fails when one differs.
data "threegate_verify" "tg" {
  provider      = meepa
  name          = threegate_network.tg.name
  denied_target = "blocked.example.net:443"
  depends_on    = [meepa_agent.core]
}

output "core_token" {
  value     = meepa_agent.core.token
  sensitive = true
}

output "core_endpoint" {
  value = meepa_agent.core.endpoint
}

output "isolated_image" {
  value = meepa_isolation_image.agents.isolated_image
}

output "connectivity" {
  description = "The probe rows as the cluster answered them."
  value       = data.threegate_verify.tg.table
}
