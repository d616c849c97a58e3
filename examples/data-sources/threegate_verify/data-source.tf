# Runs short-lived probe containers in each role of a ThreeGate topology and
# fails when what they can reach differs from what the spec allows. Targets
# left out are not probed.
data "threegate_verify" "agents" {
  provider = meepa
  name     = threegate_network.agents.name

  allowed_target  = "api.github.com:443" # must pass through the proxy
  denied_target   = "example.org:443"    # not in the allowlist: 403
  outside_address = "192.0.2.10:443"     # no member may reach it directly
  host_port       = 22                   # tried on every bridge gateway

  # Probe only after the topology exists.
  depends_on = [threegate_network.agents]
}

output "verification" {
  value = data.threegate_verify.agents.table
}
