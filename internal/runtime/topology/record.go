package topology

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// LabelSpec on the proxy container holds the topology's record
// (topospec.MarshalRecord): the spec the proxy was made from. The firewall
// settings are not in it: they live in iptables, and a change of them
// keeps the proxy.
const LabelSpec = engine.LabelPrefix + "threegate.spec"

// record is the label value for s.
func record(s topospec.Spec) (string, error) {
	s.Docker.Firewall = topospec.Firewall{}
	return topospec.MarshalRecord(s)
}

// LiveSpec reads the topology called name back from its proxy container's
// record, and checks that its networks are the topology's. A proxy made
// by an earlier release carries no record; then, once, the spec is rebuilt
// from what its networks and command line show (the next apply replaces
// the proxy with one that carries the record). The firewall settings are
// the caller's to fill. A *topospec.NotFoundError means the objects cannot
// be read.
func LiveSpec(ctx context.Context, cli client.APIClient, name string) (topospec.Spec, error) {
	notFound := func(err error) error { return &topospec.NotFoundError{Name: name, Where: "Docker", Err: err} }
	c, err := cli.ContainerInspect(ctx, topospec.ProxyName(name))
	if err != nil {
		return topospec.Spec{}, notFound(fmt.Errorf("proxy container %s: %w", topospec.ProxyName(name), err))
	}
	if c.Config == nil || c.Config.Labels[LabelTopology] != name {
		return topospec.Spec{}, notFound(fmt.Errorf("container %s is not the proxy of topology %q (label %s)", topospec.ProxyName(name), name, LabelTopology))
	}
	nets := map[string]network.Inspect{}
	for _, k := range topospec.Kinds {
		n, err := cli.NetworkInspect(ctx, NetworkName(name, k), network.InspectOptions{})
		if err != nil {
			return topospec.Spec{}, notFound(fmt.Errorf("network %s: %w", NetworkName(name, k), err))
		}
		if len(n.IPAM.Config) == 0 || n.Labels[LabelTopology] != name {
			return topospec.Spec{}, notFound(fmt.Errorf("network %s is not part of topology %q", n.Name, name))
		}
		nets[k] = n
	}
	if text, ok := c.Config.Labels[LabelSpec]; ok {
		s, err := topospec.ParseRecord(text)
		if err != nil {
			return s, fmt.Errorf("topology %q: the record on %s: %w", name, topospec.ProxyName(name), err)
		}
		if s.Name != name {
			return s, fmt.Errorf("topology %q: the record on %s is topology %q's", name, topospec.ProxyName(name), s.Name)
		}
		return s, checkSpec(s)
	}
	s, ps := Build(legacyInput(name, c, nets))
	if len(ps) > 0 {
		return s, fmt.Errorf("topology %q as found is not valid: %w", name, ps[0])
	}
	return s, nil
}

// legacyInput is the input of a topology made before records: the
// subnets and gateways from its networks, the proxy settings from the
// proxy's command line and addresses.
func legacyInput(name string, c container.InspectResponse, nets map[string]network.Inspect) topospec.Input {
	in := topospec.Input{Name: name, Docker: topospec.DockerInput{Subnets: map[string]string{}, Gateways: map[string]string{}}}
	for k, n := range nets {
		in.Docker.Subnets[k], in.Docker.Gateways[k] = n.IPAM.Config[0].Subnet, n.IPAM.Config[0].Gateway
	}
	in.Proxy.Image = c.Config.Image
	l := topospec.ReadLegacyArgs(c.Config.Cmd)
	if ap, err := netip.ParseAddrPort(l.Listen); err == nil {
		in.Docker.ProxyIP, in.Proxy.Port = ap.Addr().String(), int(ap.Port())
	} else if _, p, ok := strings.Cut(l.Listen, ":"); ok {
		in.Proxy.Port, _ = strconv.Atoi(p)
	}
	in.Proxy.Allow, in.Docker.AllowPrivate, in.Proxy.DNS = l.Allow, l.AllowPrivate, l.DNS
	if c.NetworkSettings != nil {
		if ep := c.NetworkSettings.Networks[NetworkName(name, topospec.EgressNet)]; ep != nil && ep.IPAMConfig != nil {
			in.Docker.EgressIP = ep.IPAMConfig.IPv4Address
		}
		if ep := c.NetworkSettings.Networks[NetworkName(name, topospec.FetchNet)]; ep != nil && ep.IPAMConfig != nil && in.Docker.ProxyIP == "" {
			in.Docker.ProxyIP = ep.IPAMConfig.IPv4Address
		}
	}
	return in
}
