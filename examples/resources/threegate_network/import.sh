# The import id is the topology name: the prefix of its networks
# (<name>-llmnet, <name>-fetchnet, <name>-egressnet), proxy container
# (<name>-proxy) and iptables chains (TG-<name>, TGI-<name>).
terraform import threegate_network.agents agents
