# The import id is the agent_id. The provider reads the agent back from
# <state_dir>/runners/<agent_id>/ (the runner's 0600 config and its metadata),
# so import works on the host, and with the state_dir, that made the agent.
# llm.api_key is write-only and never read back: keep it in the configuration.
# With Terraform 1.12+ an import block can name it by identity instead:
#   import {
#     to       = meepa_agent.coder
#     identity = { agent_id = "coder", backend = "docker" } # backend: docker or kubernetes, optional
#   }
# An identity for the other backend than the provider's is refused at plan.
terraform import meepa_agent.coder coder
