package sandbox

// ManagedBridge is the Docker network a per-message container with
// Network "bridge" joins: the provider-managed bridge (package bridge),
// with outbound access but no route to the host, to other containers or
// to link-local metadata. Never Docker's default "bridge", which reaches
// all three. The container cannot start while the network is missing
// (Docker refuses the create), so a host without it fails closed.
const ManagedBridge = "meepa-bridge"
