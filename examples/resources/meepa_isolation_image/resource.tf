# A Debian base with Python and jq: the container image is tagged
# meepa-sandbox:<content-hash>, and the isolation image on top of it (with
# agent-runner) meepagateway-isolated:{version}-meepa-sandbox-<content-hash>.
resource "meepa_isolation_image" "python" {
  base_image      = "debian:bookworm-slim"
  packages        = ["python3", "jq"]
  package_manager = "apt"

  env_vars = {
    LANG = "C.UTF-8"
  }

  # Agents' containers run this image: build the new one before the old one
  # is removed when packages change.
  lifecycle {
    create_before_destroy = true
  }
}

# No packages and no env vars: agent-runner layers straight onto the base.
resource "meepa_isolation_image" "plain" {
  base_image = "ghcr.io/bogpad/meepagateway-sandbox:latest"
}

output "isolated_image" {
  value = meepa_isolation_image.python.isolated_image
}
