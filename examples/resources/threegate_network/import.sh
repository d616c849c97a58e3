# The import id is the topology name: the prefix of its networks
# (<name>-llmnet, <name>-fetchnet, <name>-egressnet), proxy container
# (<name>-proxy) and iptables chains (TG-<name>, TGI-<name>).
# With Terraform 1.12+ an import block can name it by identity instead:
#   import {
#     to       = threegate_network.agents
#     identity = { name = "agents", backend = "docker" } # backend: docker or kubernetes, optional
#   }
# An identity for the other backend than the provider's is refused at plan.
terraform import threegate_network.agents agents
