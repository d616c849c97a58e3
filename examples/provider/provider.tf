terraform {
  required_providers {
    meepa = {
      source = "bogpad/meepa"
    }
  }
}

# Every setting is optional: the defaults talk to the local Docker socket
# (or DOCKER_HOST) and keep agent workspaces under ~/.meepagateway.
provider "meepa" {
  docker_host = "unix:///var/run/docker.sock"
  state_dir   = "/var/lib/meepagateway"
}
