# A token for five minutes, for a smoke test after each change of the agent:
# it is in neither the plan nor the state, and the runner stops taking it
# when it expires (or when the agent's token_version changes).
ephemeral "meepa_agent_token" "core" {
  agent_id    = meepa_agent.core.agent_id
  ttl_seconds = 300
}

resource "terraform_data" "smoke" {
  triggers_replace = [meepa_agent.core.config_hash]

  provisioner "local-exec" {
    command     = "curl --fail -s --unix-socket \"$SOCKET\" http://localhost/v1/messages -H \"Authorization: Bearer $TOKEN\" -d '{\"text\": \"ping\"}'"
    environment = { SOCKET = trimprefix(meepa_agent.core.endpoint, "unix://"), TOKEN = ephemeral.meepa_agent_token.core.token }
  }
}
