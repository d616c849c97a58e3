package topology

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// Label keys (under engine.LabelPrefix) on every object of a topology.
const (
	LabelTopology = engine.LabelPrefix + "threegate"
	LabelKind     = engine.LabelPrefix + "threegate.kind"
	LabelConfig   = engine.LabelPrefix + "threegate.config"
	// LabelRole marks a member container's role (CORE, FETCH, TOOL_EXEC);
	// Verify checks labelled members against RoleNetworks.
	LabelRole = engine.LabelPrefix + "threegate.role"
)

// topospec.Proxy container limits. The proxy holds one goroutine and two sockets per
// connection; these leave room for hundreds of concurrent fetches.
const (
	ProxyMemory = 128 << 20
	ProxyPids   = 128
	ProxyUser   = "65534:65534"
)

// NetworkRemoveWait bounds how long removing a network waits for endpoints
// that Docker is still tearing down after their container went away.
const NetworkRemoveWait = 15 * time.Second

// Observed is what Docker shows of a topology.
type Observed struct {
	Networks map[string]ObservedNetwork // by kind; absent = missing
	Proxy    *ObservedProxy             // nil = missing
}

// ObservedNetwork is a live network.
type ObservedNetwork struct {
	ID, Name         string
	Subnet, Gateway  string
	IPRange          string
	Internal, Owned  bool
	IPv6             bool              // EnableIPv6: a v6 path that no rule covers
	Containers       map[string]string // container id -> name
	ContainerAddress map[string]string // container id -> IPv4 (no prefix)
}

// ObservedProxy is the live proxy container.
type ObservedProxy struct {
	ID      string
	Running bool
	Status  string
	Config  string            // LabelConfig value
	Record  string            // LabelSpec value; "" on a proxy made before records
	IPs     map[string]string // network name -> address
	// Key is the topology's egress key, from the proxy's environment; nil
	// on a proxy made before per-message credentials.
	Key []byte
}

// Observe inspects the networks and the proxy container of spec.
func Observe(ctx context.Context, cli client.APIClient, s topospec.Spec) (Observed, error) {
	o := Observed{Networks: map[string]ObservedNetwork{}}
	for _, n := range s.Docker.Networks {
		in, err := cli.NetworkInspect(ctx, n.Name, network.InspectOptions{})
		if errdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			return o, fmt.Errorf("network inspect %s: %w", n.Name, err)
		}
		if in.Name != n.Name { // matched an id prefix, not our name
			continue
		}
		on := ObservedNetwork{ID: in.ID, Name: in.Name, Internal: in.Internal, IPv6: in.EnableIPv6, Owned: in.Labels[LabelTopology] == s.Name,
			Containers: map[string]string{}, ContainerAddress: map[string]string{}}
		if len(in.IPAM.Config) > 0 {
			on.Subnet, on.Gateway, on.IPRange = in.IPAM.Config[0].Subnet, in.IPAM.Config[0].Gateway, in.IPAM.Config[0].IPRange
		}
		for id, ep := range in.Containers {
			on.Containers[id] = ep.Name
			if p, err := netip.ParsePrefix(ep.IPv4Address); err == nil {
				on.ContainerAddress[id] = p.Addr().String()
			}
		}
		o.Networks[n.Kind] = on
	}
	c, err := cli.ContainerInspect(ctx, topospec.ProxyName(s.Name))
	if errdefs.IsNotFound(err) {
		return o, nil
	}
	if err != nil {
		return o, fmt.Errorf("container inspect %s: %w", topospec.ProxyName(s.Name), err)
	}
	p := &ObservedProxy{ID: c.ID, IPs: map[string]string{}}
	if c.State != nil {
		p.Running, p.Status = c.State.Running, c.State.Status
	}
	if c.Config != nil {
		p.Config, p.Record = c.Config.Labels[LabelConfig], c.Config.Labels[LabelSpec]
		p.Key = keyOf(c.Config.Env)
	}
	if c.NetworkSettings != nil {
		for name, ep := range c.NetworkSettings.Networks {
			if ep != nil {
				p.IPs[name] = ep.IPAddress
			}
		}
	}
	o.Proxy = p
	return o, nil
}

// networkMatches reports whether a live network is the planned one.
func networkMatches(n topospec.Network, o ObservedNetwork) bool {
	return o.Owned && !o.IPv6 && o.Internal == n.Internal && o.Subnet == n.Subnet.String() &&
		o.Gateway == n.Gateway.String() && o.IPRange == n.IPRange.String()
}

// ProxyConfigHash identifies the proxy container's configuration; a live
// container with another hash is replaced.
func ProxyConfigHash(s topospec.Spec) string {
	h := sha256.New()
	// A hash.Hash's Write never returns an error.
	_, _ = fmt.Fprintf(h, "v1\n%s\n%s\n%s\n%s\n%d\n%d\n%s\n", s.Proxy.Image, strings.Join(proxyCommand(s), "\x00"),
		s.Docker.ProxyIP, s.Docker.EgressIP, ProxyMemory, ProxyPids, ProxyUser)
	for _, n := range s.Docker.Networks {
		_, _ = fmt.Fprintf(h, "%s %s\n", n.Name, n.Subnet) // as above
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// proxyConfigured reports whether the live proxy has the planned
// configuration and attachments; a stopped container can have them (the
// daemon keeps a stopped container's endpoints configuration but reports
// no address), so addresses are only compared while it runs.
func proxyConfigured(s topospec.Spec, p *ObservedProxy) bool {
	if p == nil || p.Config != ProxyConfigHash(s) || len(p.IPs) != 2 || p.Key == nil {
		return false
	}
	if rec, err := record(s); err != nil || p.Record != rec {
		return false
	}
	fetch, egress := s.Network(topospec.FetchNet).Name, s.Network(topospec.EgressNet).Name
	if _, ok := p.IPs[fetch]; !ok {
		return false
	}
	if _, ok := p.IPs[egress]; !ok {
		return false
	}
	return !p.Running || (p.IPs[fetch] == s.Docker.ProxyIP.String() && p.IPs[egress] == s.Docker.EgressIP.String())
}

// proxyMatches reports whether the live proxy is the planned one and runs.
func proxyMatches(s topospec.Spec, o Observed) bool {
	return o.Proxy != nil && o.Proxy.Running && proxyConfigured(s, o.Proxy)
}

// Drift lists, in words, how Docker differs from spec; empty means in sync.
func Drift(s topospec.Spec, o Observed) []string {
	var out []string
	for _, n := range s.Docker.Networks {
		on, ok := o.Networks[n.Kind]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("network %s is missing", n.Name))
		case !on.Owned:
			out = append(out, fmt.Sprintf("network %s exists but is not labelled as part of topology %q", n.Name, s.Name))
		case on.Owned && on.IPv6:
			out = append(out, fmt.Sprintf("network %s has IPv6 enabled: its members get a v6 path that no firewall rule covers", n.Name))
		case !networkMatches(n, on):
			out = append(out, fmt.Sprintf("network %s differs: subnet %s gateway %s internal %t, want %s %s %t",
				n.Name, on.Subnet, on.Gateway, on.Internal, n.Subnet, n.Gateway, n.Internal))
		}
	}
	p := o.Proxy
	switch {
	case p == nil:
		out = append(out, fmt.Sprintf("proxy container %s is missing", topospec.ProxyName(s.Name)))
	case !p.Running:
		out = append(out, fmt.Sprintf("proxy container %s is not running (%s)", topospec.ProxyName(s.Name), p.Status))
	case p.Record == "":
		out = append(out, fmt.Sprintf("proxy container %s carries no record of its topology (made by an earlier release); "+
			"the next apply replaces it with one that does", topospec.ProxyName(s.Name)))
	case p.Key == nil:
		out = append(out, fmt.Sprintf("proxy container %s has no egress key (made by an earlier release): its requests carry no "+
			"per-message identity; the next apply replaces it with one that requires a credential per message", topospec.ProxyName(s.Name)))
	case !proxyMatches(s, o):
		out = append(out, fmt.Sprintf("proxy container %s differs from the configuration (image, command, addresses or networks)", topospec.ProxyName(s.Name)))
	}
	return out
}

func foreignEndpoints(on ObservedNetwork, proxy *ObservedProxy) []string {
	var out []string
	for id, name := range on.Containers {
		if proxy != nil && id == proxy.ID {
			continue
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// networkCreateOptions is how every network of a topology is made: a
// bridge with the planned IPAM (pinned addresses below Docker's dynamic
// range), internal or not, IPv6 off said explicitly (the firewall is IPv4
// only, and a daemon whose default network options turn IPv6 on would give
// members a path no rule covers), and the topology's ownership labels.
func networkCreateOptions(s topospec.Spec, n topospec.Network) network.CreateOptions {
	ipv6 := false
	return network.CreateOptions{
		Driver:     "bridge",
		Internal:   n.Internal,
		EnableIPv6: &ipv6,
		IPAM: &network.IPAM{Driver: "default", Config: []network.IPAMConfig{{
			Subnet: n.Subnet.String(), Gateway: n.Gateway.String(), IPRange: n.IPRange.String(),
		}}},
		Labels: engine.Labels("network", map[string]string{"threegate": s.Name, "threegate.kind": n.Kind}),
	}
}

func (sv *Service) createNetwork(ctx context.Context, s topospec.Spec, n topospec.Network) error {
	resp, err := sv.docker.NetworkCreate(ctx, n.Name, networkCreateOptions(s, n))
	if err != nil {
		if strings.Contains(err.Error(), "overlaps") {
			return fmt.Errorf("network create %s: subnet %s overlaps an existing Docker network or host address range: %w; "+
				"choose another %s_subnet", n.Name, n.Subnet, err, n.Kind)
		}
		return fmt.Errorf("network create %s: %w", n.Name, err)
	}
	sv.log.Debug("network created", "topology", s.Name, "network", n.Name, "id", resp.ID, "kind", n.Kind,
		"subnet", n.Subnet.String(), "gateway", n.Gateway.String(), "internal", n.Internal)
	return sv.refuseIPv6(ctx, n.Name, resp.ID)
}

// removeNetwork removes a network, retrying for a bounded time while Docker
// still lists endpoints of containers it is removing.
func (sv *Service) removeNetwork(ctx context.Context, id, name string) error {
	cli := sv.docker
	deadline := time.Now().Add(NetworkRemoveWait)
	for {
		err := cli.NetworkRemove(ctx, id)
		if err == nil {
			sv.log.Debug("network removed", "network", name, "id", id)
			return nil
		}
		if errdefs.IsNotFound(err) {
			return nil
		}
		// Both are the daemon still settling the endpoints of containers
		// just removed (Docker 20.10 also answers the second when the last
		// endpoint's removal races the network's); FETCH runners, on the
		// role's networks to revoke at the proxy, are among them.
		settling := strings.Contains(err.Error(), "active endpoints") || strings.Contains(err.Error(), "endpoint count from store")
		if !settling || time.Now().After(deadline) || endpointsLive(ctx, cli, id) {
			in, ierr := cli.NetworkInspect(ctx, id, network.InspectOptions{})
			if ierr == nil && len(in.Containers) > 0 {
				var names []string
				for _, ep := range in.Containers {
					names = append(names, ep.Name)
				}
				sort.Strings(names)
				return fmt.Errorf("network remove %s: containers are still attached: %s; detach or destroy them first: %w",
					in.Name, strings.Join(names, ", "), err)
			}
			return fmt.Errorf("network remove %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// endpointsLive reports whether a container attached to the network still
// exists; only endpoints of containers already removed are worth waiting for.
func endpointsLive(ctx context.Context, cli client.APIClient, id string) bool {
	in, err := cli.NetworkInspect(ctx, id, network.InspectOptions{})
	if err != nil {
		return false
	}
	for cid := range in.Containers {
		if _, err := cli.ContainerInspect(ctx, cid); err == nil {
			return true
		}
	}
	return false
}

// removeContainer force-removes a container; one already gone is fine.
func (sv *Service) removeContainer(ctx context.Context, id, name string) error {
	err := sv.docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
	switch {
	case errdefs.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("container remove %s: %w", id, err)
	}
	sv.log.Debug("container removed", "container", name, "id", id)
	return nil
}

// ProxyHostConfig is the proxy's hardening: read-only rootfs, no
// capabilities, no privilege escalation, memory (swap equal) and pids caps,
// restarted by the daemon unless an operator stopped it.
// keyOf reads the egress key from a proxy container's environment.
func keyOf(env []string) []byte {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, proxy.EnvEgressKey+"="); ok {
			if k, err := proxy.ParseKey(v); err == nil {
				return k
			}
		}
	}
	return nil
}

// EgressKey is the egress key of the topology called name, read from its
// proxy: what an agent's apply derives the agent's key from. A proxy made
// before per-message credentials has none: apply the threegate_network
// first.
func EgressKey(ctx context.Context, cli client.APIClient, name string) ([]byte, error) {
	c, err := cli.ContainerInspect(ctx, topospec.ProxyName(name))
	if err != nil {
		return nil, fmt.Errorf("proxy container %s: %w", topospec.ProxyName(name), err)
	}
	if c.Config == nil || c.Config.Labels[LabelTopology] != name {
		return nil, fmt.Errorf("container %s is not the proxy of topology %q", topospec.ProxyName(name), name)
	}
	k := keyOf(c.Config.Env)
	if k == nil {
		return nil, fmt.Errorf("the proxy of topology %q has no egress key (made by an earlier release); apply its threegate_network first, "+
			"which replaces the proxy with one that requires a per-message credential", name)
	}
	return k, nil
}

func ProxyHostConfig(fetchnet string) *container.HostConfig {
	pids := int64(ProxyPids)
	return &container.HostConfig{
		NetworkMode:    container.NetworkMode(fetchnet),
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
		Resources:      container.Resources{Memory: ProxyMemory, MemorySwap: ProxyMemory, PidsLimit: &pids},
		Tmpfs:          map[string]string{"/tmp": "rw,noexec,nosuid,size=16m"},
		LogConfig:      container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "10m", "max-file": "3"}},
	}
}

// proxyCommand is the Docker proxy's command line: the topology's, and a
// credential on every request (the key is in its environment, EnvEgressKey).
func proxyCommand(s topospec.Spec) []string {
	return append(topospec.ProxyCommand(s), "--require-credential")
}

// createProxy makes and starts the proxy with the topology's egress key:
// key when the proxy it replaces had one, so that the agents' derived
// keys stay good, else a new one.
func (sv *Service) createProxy(ctx context.Context, s topospec.Spec, key []byte) error {
	cli := sv.docker
	if key == nil {
		var err error
		if key, err = proxy.NewKey(); err != nil {
			return err
		}
	}
	if _, err := cli.ImageInspect(ctx, s.Proxy.Image); err != nil {
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("proxy image %s is not present on the daemon (nothing is pulled); build it first, "+
				"e.g. with meepa_isolation_image", s.Proxy.Image)
		}
		return fmt.Errorf("image inspect %s: %w", s.Proxy.Image, err)
	}
	rec, err := record(s)
	if err != nil {
		return err
	}
	fetch, egress := s.Network(topospec.FetchNet), s.Network(topospec.EgressNet)
	resp, err := cli.ContainerCreate(ctx, &container.Config{
		Image:      s.Proxy.Image,
		Entrypoint: proxyCommand(s)[:1],
		Cmd:        proxyCommand(s)[1:],
		Env:        []string{proxy.EnvEgressKey + "=" + hex.EncodeToString(key)},
		User:       ProxyUser,
		Labels:     engine.Labels("proxy", map[string]string{"threegate": s.Name, "threegate.config": ProxyConfigHash(s), "threegate.spec": rec}),
	}, ProxyHostConfig(fetch.Name), &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
		fetch.Name: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: s.Docker.ProxyIP.String()}},
	}}, nil, topospec.ProxyName(s.Name))
	if err != nil {
		return fmt.Errorf("container create %s: %w", topospec.ProxyName(s.Name), err)
	}
	// API 1.41 takes one network at create; the second is connected before start.
	if err := cli.NetworkConnect(ctx, egress.Name, resp.ID, &network.EndpointSettings{
		IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: s.Docker.EgressIP.String()},
	}); err != nil {
		_ = sv.removeContainer(ctx, resp.ID, topospec.ProxyName(s.Name))
		return fmt.Errorf("network connect %s to %s: %w", topospec.ProxyName(s.Name), egress.Name, err)
	}
	sv.log.Debug("proxy container created", "topology", s.Name, "container", topospec.ProxyName(s.Name), "id", resp.ID,
		"image", s.Proxy.Image, "config", ProxyConfigHash(s), "ip", s.Docker.ProxyIP.String(), "egress_ip", s.Docker.EgressIP.String(),
		"port", s.Proxy.Port, "allow_entries", len(s.Proxy.Allow))
	return sv.startProxy(ctx, resp.ID, topospec.ProxyName(s.Name))
}

// startProxy starts the proxy and checks, for a bounded moment, that it
// stays up; a proxy that exits at once (bad flag, missing binary) is an
// error with its last log lines.
func (sv *Service) startProxy(ctx context.Context, id, name string) error {
	cli := sv.docker
	if err := cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		return fmt.Errorf("container start proxy: %w", err)
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		c, err := cli.ContainerInspect(ctx, id)
		if err != nil {
			return fmt.Errorf("container inspect proxy: %w", err)
		}
		if c.State != nil && !c.State.Running {
			return fmt.Errorf("proxy exited right after start (exit code %d): %s", c.State.ExitCode, tailLogs(ctx, cli, id))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("container start proxy: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	sv.log.Debug("proxy container started", "container", name, "id", id)
	return nil
}

func tailLogs(ctx context.Context, cli client.APIClient, id string) string {
	rc, err := cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return "(no logs: " + err.Error() + ")"
	}
	defer func() { _ = rc.Close() }() // read-only stream
	var b strings.Builder
	_, _ = stdcopy.StdCopy(&b, &b, io.LimitReader(rc, 8<<10))
	return strings.TrimSpace(b.String())
}

// Conflicts reports planned subnets that overlap a Docker network that is
// not part of this topology, or (when hostRoutes is set, i.e. the daemon
// runs on this machine) a route of this host that Docker did not make.
func Conflicts(ctx context.Context, cli client.APIClient, s topospec.Spec, hostRoutes bool) (fault.List, error) {
	var ps fault.List
	nets, err := cli.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("network list: %w", err)
	}
	dockerDevs := map[string]bool{"docker0": true}
	for _, dn := range nets {
		if len(dn.ID) >= 12 {
			dockerDevs["br-"+dn.ID[:12]] = true
		}
		if dn.Labels[LabelTopology] == s.Name {
			continue
		}
		for _, c := range dn.IPAM.Config {
			p, err := netip.ParsePrefix(c.Subnet)
			if err != nil {
				continue
			}
			for _, n := range s.Docker.Networks {
				if n.Subnet.Overlaps(p) {
					ps.Add(n.Kind+"_subnet", -1, "Subnet Overlaps A Docker Network",
						"%s subnet %s overlaps Docker network %q (%s); choose a free range.", n.Kind, n.Subnet, dn.Name, p)
				}
			}
		}
	}
	if !hostRoutes {
		return ps, nil
	}
	routes, err := HostRoutes()
	if err != nil {
		return ps, err
	}
	for _, r := range routes {
		if dockerDevs[r.Dev] || r.Prefix.Bits() == 0 {
			continue
		}
		for _, n := range s.Docker.Networks {
			if n.Subnet.Overlaps(r.Prefix) {
				ps.Add(n.Kind+"_subnet", -1, "Subnet Overlaps A Host Route",
					"%s subnet %s overlaps the host route %s on %s; traffic to it would be ambiguous. Choose a free range.",
					n.Kind, n.Subnet, r.Prefix, r.Dev)
			}
		}
	}
	return ps, nil
}

// Route is one IPv4 route of the host.
type Route struct {
	Dev    string
	Prefix netip.Prefix
}

// HostRoutes reads the host's IPv4 routing table from /proc/net/route.
func HostRoutes() ([]Route, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil, fmt.Errorf("read routes: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	var out []Route
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 {
			continue
		}
		dst, err1 := strconv.ParseUint(fs[1], 16, 32)
		mask, err2 := strconv.ParseUint(fs[7], 16, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		// The file is in host byte order, which is little-endian on every
		// architecture Docker runs this on.
		d := [4]byte{byte(dst), byte(dst >> 8), byte(dst >> 16), byte(dst >> 24)}
		m := uint32(mask)
		bits := 0
		for m != 0 {
			bits += int(m & 1)
			m >>= 1
		}
		out = append(out, Route{Dev: fs[0], Prefix: netip.PrefixFrom(netip.AddrFrom4(d), bits).Masked()})
	}
	return out, sc.Err()
}

// EngineLeaksDNS reports whether a Docker Engine version is one affected by
// CVE-2024-29018 (DNS from internal networks forwarded through the host's
// namespace): before 23.0.11, 24.x, and 25.0.x before 25.0.4. Fixed in
// 26.0.0, 25.0.4 and 23.0.11. Distributions backport fixes, so callers warn.
func EngineLeaksDNS(version string) bool {
	v := version
	if i := strings.IndexAny(v, "+-~"); i >= 0 {
		v = v[:i]
	}
	parts := strings.SplitN(v, ".", 3)
	num := func(i int) int {
		if i >= len(parts) {
			return 0
		}
		n, _ := strconv.Atoi(parts[i])
		return n
	}
	major, minor, patch := num(0), num(1), num(2)
	switch {
	case major < 23:
		return true
	case major == 23:
		return minor == 0 && patch < 11
	case major == 24:
		return true
	case major == 25:
		return minor == 0 && patch < 4
	}
	return false
}

// Members lists containers attached to any network of the topology, with
// the networks each is on, for the membership check.
func Members(ctx context.Context, cli client.APIClient, s topospec.Spec) ([]container.Summary, error) {
	var out []container.Summary
	seen := map[string]bool{}
	for _, n := range s.Docker.Networks {
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("network", n.Name))})
		if err != nil {
			return nil, fmt.Errorf("container list on %s: %w", n.Name, err)
		}
		for _, c := range cs {
			if !seen[c.ID] {
				seen[c.ID] = true
				out = append(out, c)
			}
		}
	}
	return out, nil
}
