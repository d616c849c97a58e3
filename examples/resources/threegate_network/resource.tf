terraform {
  required_providers {
    meepa = { source = "bogpad/meepa" }
  }
}

provider "meepa" {}

# threegate_network is served by provider meepa: name it explicitly.
resource "threegate_network" "agents" {
  provider = meepa
  name     = "agents"

  # Optional; the defaults are three /24s derived from the name.
  llmnet_subnet    = "10.213.1.0/24"
  fetchnet_subnet  = "10.213.2.0/24"
  egressnet_subnet = "10.213.3.0/24"

  proxy = {
    # An isolation image containing /usr/local/bin/agent-runner,
    # e.g. meepa_isolation_image.base.isolated_image.
    image = "meepagateway-isolated:0.1.0-meepa-sandbox-3f9a1c2b"
    allow = [
      "api.github.com",  # port 443
      "*.wikipedia.org", # any subdomain, port 443
      "pypi.org:443",
    ]
    ip        = "10.213.2.2" # pinned on fetchnet
    egress_ip = "10.213.3.2" # pinned on egressnet: the only source let out
    dns       = ["9.9.9.9"]
  }

  firewall = {
    enabled    = true
    log_denied = true
  }
}

# What each role joins and sets, for meepa_agent.
output "fetch_env" {
  value = threegate_network.agents.roles["FETCH"].env
}

# Load at boot, after docker.service: iptables-restore --noflush < file
output "iptables_restore" {
  value = threegate_network.agents.iptables_restore
}
