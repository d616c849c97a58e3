resource "meepa_isolation_image" "python" {
  base_image = "debian:bookworm-slim"
  packages   = ["python3", "git"]
}

resource "threegate_network" "tg" {
  provider = meepa
  name     = "prod"
  proxy = {
    image = meepa_isolation_image.python.isolated_image
    allow = ["api.anthropic.com", "api.github.com"]
  }
}

variable "anthropic_api_key" {
  type      = string
  sensitive = true
  ephemeral = true
}

variable "github_token" {
  type      = string
  sensitive = true
}

# Container mode: each message runs the whole agent loop in a fresh,
# hardened container that sees only the workspace.
resource "meepa_agent" "coder" {
  agent_id = "coder"
  soul     = file("${path.module}/SOUL.md")

  llm = {
    provider = "anthropic"
    model    = "claude-sonnet-4-5"
    api_key  = var.anthropic_api_key # write-only: never stored in state
  }
  container_mode = {
    enabled         = true
    image           = meepa_isolation_image.python.isolated_image
    memory_limit    = "1g"
    timeout_seconds = 600
    network         = "bridge"
  }
}

# The CORE of a ThreeGate topology: its containers join llmnet only, where an
# LLM gateway answers; no internet, no proxy.
resource "meepa_agent" "core" {
  agent_id = "core"
  llm = {
    provider = "openai"
    base_url = "http://llm-gateway:4000/v1"
    model    = "local-model"
  }
  container_mode = {
    enabled = true
    image   = meepa_isolation_image.python.isolated_image
  }
  threegate = {
    network = threegate_network.tg.id
    role    = "core"
  }
  runner = {
    listen = "127.0.0.1:8701"
  }
}

# The FETCH agent of the same topology: its only way out is the egress
# proxy. Its tools see a placeholder in $GITHUB_TOKEN, valid for one
# message; the proxy writes the real token into the Authorization header
# of HTTPS requests to api.github.com only.
resource "meepa_agent" "fetch" {
  agent_id = "fetch"
  llm = {
    provider = "openai"
    base_url = "http://llm-gateway:4000/v1"
    model    = "local-model"
  }
  secrets = {
    GITHUB_TOKEN = var.github_token # write-only like api_key: never in plan or state
  }
  secret_bindings = {
    GITHUB_TOKEN = { hosts = ["api.github.com"], scheme = "Bearer" }
  }
  container_mode = {
    enabled = true
    image   = meepa_isolation_image.python.isolated_image
  }
  threegate = {
    network = threegate_network.tg.id
    role    = "fetch"
  }
}

# Host mode with Landlock: the agent runs as a restricted process; deny wins
# over allow_read_write, which wins over allow_read.
resource "meepa_agent" "notes" {
  agent_id = "notes"
  llm      = { provider = "offline" }
  file_access = {
    allow_read       = ["/srv/docs"]
    allow_read_write = ["/srv/notes"]
    deny             = ["/srv/notes/private"]
    allow_network    = false
  }
  runner = {
    # The provider writes the config; systemd runs the service (see the
    # isolation-models guide for the unit).
    deployment = "external"
  }
}

output "coder_endpoint" {
  value = meepa_agent.coder.endpoint
}
