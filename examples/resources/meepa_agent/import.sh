# The import id is the agent_id. The provider reads the agent back from
# <state_dir>/runners/<agent_id>/ (the runner's 0600 config and its metadata),
# so import works on the host, and with the state_dir, that made the agent.
# llm.api_key is write-only and never read back: keep it in the configuration.
terraform import meepa_agent.coder coder
