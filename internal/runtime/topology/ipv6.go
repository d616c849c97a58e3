package topology

import (
	"context"
	"errors"
	"fmt"

	"github.com/docker/docker/api/types/network"
)

// refuseIPv6 removes a network the daemon created with IPv6 on although it
// was asked for IPv6 off (a daemon or plugin that forces it), and says so:
// the host firewall has no ip6tables rules, so such a network would be an
// unguarded path.
func (sv *Service) refuseIPv6(ctx context.Context, name, id string) error {
	in, err := sv.docker.NetworkInspect(ctx, id, network.InspectOptions{})
	if err != nil {
		return fmt.Errorf("network inspect %s: %w", name, err)
	}
	if !in.EnableIPv6 {
		return nil
	}
	return errors.Join(fmt.Errorf("network create %s: the daemon enabled IPv6 although it was created with IPv6 off; "+
		"the ThreeGate firewall covers IPv4 only, so the network was removed. Turn off IPv6 for new networks in the "+
		"daemon's configuration (daemon.json \"ipv6\" and \"default-network-opts\") and apply again", name),
		sv.removeNetwork(ctx, id, name))
}
