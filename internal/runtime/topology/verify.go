package topology

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/probe"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

type roleProbe struct {
	topospec.ProbeRows
	name     string       // the probe container's name
	networks []string     // network names; empty = network none
	dns      []netip.Addr // HostConfig.DNS, as the role's members get it
	env      []string
}

func newRoleProbe(s topospec.Spec, role string, r topospec.Role) *roleProbe {
	name := fmt.Sprintf("%s-probe-%s-%d", s.Name, strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(role)), time.Now().UnixNano()%1e6)
	return &roleProbe{ProbeRows: topospec.ProbeRows{Role: role}, name: name, networks: r.Networks, dns: r.DNS}
}

// addDNS adds the role's DNS rows: an outside name must not resolve, and
// (on the role's networks) the probe's own name, which the engine's
// resolver answers, must.
func (rp *roleProbe) addDNS(outside string) {
	rp.Add("DNS outside name", topospec.ExpectNoDNS, probe.Check{Kind: probe.DNS, Target: outside})
	if len(rp.networks) > 0 {
		rp.Add("DNS topology name", topospec.ExpectDNS, probe.Check{Kind: probe.DNS, Target: rp.name})
	}
}

// Verify runs short-lived probe containers in each role and compares what
// they reach with what the spec allows; it also checks every container
// attached to the topology's networks against the membership rules.
func (sv *Service) Verify(ctx context.Context, s topospec.Spec, o topospec.VerifyOptions) (topospec.Report, error) {
	o, named := o.WithDefaults(s)
	// The direct asks of the proxy's DNS server send packets towards it
	// (the firewall must stop them): only for a name the operator gave.
	askProxyDNS := named && len(s.Proxy.DNS) > 0
	sv.log.Debug("verifying threegate topology", "topology", s.Name, "image", o.Image)
	llm, fetch := s.Network(topospec.LLMNet), s.Network(topospec.FetchNet)
	proxyAddr := netip.AddrPortFrom(s.Docker.ProxyIP, uint16(s.Proxy.Port)).String()
	gw := func(n topospec.Network) string { return netip.AddrPortFrom(n.Gateway, uint16(o.HostPort)).String() }
	roles := Roles(s)

	core := newRoleProbe(s, topospec.RoleCore, roles[topospec.RoleCore])
	core.Add("proxy", topospec.ExpectBlocked, probe.Check{Kind: probe.TCP, Target: proxyAddr})
	core.Add("host via llmnet gateway", topospec.ExpectBlocked, probe.Check{Kind: probe.TCP, Target: gw(llm)})
	if o.OutsideAddress != "" {
		core.Add("outside address", topospec.ExpectBlocked, probe.Check{Kind: probe.TCP, Target: o.OutsideAddress})
	}
	direct := allowedDirect(o.AllowedTarget)
	if direct != "" {
		core.Add("allowed host directly", topospec.ExpectBlocked, probe.Check{Kind: probe.TCP, Target: direct})
	}
	core.addDNS(o.DNSName)
	dnsDirect := func(rp *roleProbe) {
		if !askProxyDNS {
			return
		}
		srv := netip.AddrPortFrom(s.Proxy.DNS[0], 53).String()
		rp.Add("proxy's DNS server udp/53", topospec.ExpectBlocked, probe.Check{Kind: probe.DNSAt, Via: srv, Target: o.DNSName})
		rp.Add("proxy's DNS server tcp/53", topospec.ExpectBlocked, probe.Check{Kind: probe.TCP, Target: srv})
	}
	dnsDirect(core)

	fe := newRoleProbe(s, topospec.RoleFetch, roles[topospec.RoleFetch])
	for k, v := range roles[topospec.RoleFetch].Env {
		fe.env = append(fe.env, k+"="+v)
	}
	auth, err := sv.probeCredential(ctx, s, o.Timeout)
	if err != nil {
		return topospec.Report{}, err
	}
	if auth != "" {
		fe.env = append(fe.env, probe.EnvProxyAuthorization+"="+auth)
	}
	fe.Add("proxy", topospec.ExpectOpen, probe.Check{Kind: probe.TCP, Target: proxyAddr})
	if o.AllowedTarget != "" {
		fe.Add("allowed host via proxy", topospec.ExpectAllowed, probe.Check{Kind: probe.Connect, Via: proxyAddr, Target: o.AllowedTarget})
	}
	if t := o.AnyTarget(); t != "" && auth != "" {
		fe.Add("proxy, no credential", topospec.ExpectAuthRequired, probe.Check{Kind: probe.ConnectAnon, Via: proxyAddr, Target: t})
	}
	if direct != "" {
		fe.Add("allowed host directly", topospec.ExpectBlocked, probe.Check{Kind: probe.TCP, Target: direct})
	}
	if o.DeniedTarget != "" {
		fe.Add("disallowed host via proxy", topospec.ExpectDenied, probe.Check{Kind: probe.Connect, Via: proxyAddr, Target: o.DeniedTarget})
	}
	if o.OutsideAddress != "" {
		fe.Add("outside address directly", topospec.ExpectBlocked, probe.Check{Kind: probe.TCP, Target: o.OutsideAddress})
		fe.Add("outside address via proxy", topospec.ExpectDenied, probe.Check{Kind: probe.Connect, Via: proxyAddr, Target: o.OutsideAddress})
	}
	fe.Add("host via fetchnet gateway", topospec.ExpectBlocked, probe.Check{Kind: probe.TCP, Target: gw(fetch)})
	fe.addDNS(o.DNSName)
	dnsDirect(fe)

	te := newRoleProbe(s, topospec.RoleToolExec, roles[topospec.RoleToolExec])
	te.Add("proxy", topospec.ExpectBlocked, probe.Check{Kind: probe.TCP, Target: proxyAddr})
	te.Add("host via llmnet gateway", topospec.ExpectBlocked, probe.Check{Kind: probe.TCP, Target: gw(llm)})
	te.addDNS(o.DNSName)
	sb := newRoleProbe(s, topospec.RoleToolExec+"/sandbox", topospec.Role{}) // network none: no resolver at all
	sb.Add("proxy", topospec.ExpectBlocked, probe.Check{Kind: probe.TCP, Target: proxyAddr})
	if o.OutsideAddress != "" {
		sb.Add("outside address", topospec.ExpectBlocked, probe.Check{Kind: probe.TCP, Target: o.OutsideAddress})
	}
	sb.addDNS(o.DNSName)

	all := []*roleProbe{core, fe, te, sb}
	var wg sync.WaitGroup
	errs := make([]error, len(all))
	for i, rp := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = sv.runRole(ctx, s, o, rp)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return topospec.Report{}, err
	}
	var rep topospec.Report
	for _, rp := range all {
		rep.Probes = append(rep.Probes, rp.Rows...)
	}
	v, err := Violations(ctx, sv.docker, s)
	if err != nil {
		return rep, err
	}
	rep.Violations = v
	return rep, nil
}

// allowedDirect returns the allowed target when its host is an IP literal,
// else "". A name would have to be resolved inside CORE or FETCH, which
// have no DNS of their own: the dial would fail on the lookup and prove
// nothing about the firewall.
func allowedDirect(target string) string {
	ap, err := netip.ParseAddrPort(target)
	if err != nil {
		return ""
	}
	return ap.String()
}

// probeCredential is the Proxy-Authorization of the FETCH probe
// (topospec.ProbeCredential). "" when the proxy has no key (made by an
// earlier release, or missing: its rows say so).
func (sv *Service) probeCredential(ctx context.Context, s topospec.Spec, timeout time.Duration) (string, error) {
	key, err := EgressKey(ctx, sv.docker, s.Name)
	if err != nil {
		return "", nil
	}
	return topospec.ProbeCredential(key, timeout)
}

// runRole runs one probe container with the role's networks and fills the
// observed column.
func (sv *Service) runRole(ctx context.Context, s topospec.Spec, o topospec.VerifyOptions, rp *roleProbe) error {
	cli := sv.docker
	args := []string{"probe", "--timeout", o.Timeout.String()}
	for _, c := range rp.Checks {
		args = append(args, c.String())
	}
	mode := "none"
	if len(rp.networks) > 0 {
		mode = rp.networks[0]
	}
	pids := int64(32)
	name := rp.name
	var search []string
	if len(rp.dns) > 0 {
		search = []string{"."} // as the members: no search domain
	}
	resp, err := cli.ContainerCreate(ctx, &container.Config{
		Image: o.Image, Entrypoint: []string{"/usr/local/bin/agent-runner"}, Cmd: args, Env: rp.env, User: ProxyUser,
		Labels: engine.Labels("probe", map[string]string{"threegate": s.Name, "threegate.role": rp.Role}),
	}, &container.HostConfig{
		NetworkMode: container.NetworkMode(mode), ReadonlyRootfs: true, CapDrop: []string{"ALL"}, DNS: addrStrings(rp.dns), DNSSearch: search,
		SecurityOpt: []string{"no-new-privileges"},
		Resources:   container.Resources{Memory: 64 << 20, MemorySwap: 64 << 20, PidsLimit: &pids},
	}, nil, nil, name)
	if err != nil {
		return fmt.Errorf("probe %s: container create: %w", rp.Role, err)
	}
	sv.log.Debug("probe container created", "topology", s.Name, "container", name, "id", resp.ID, "role", rp.Role,
		"networks", strings.Join(rp.networks, ","), "checks", len(rp.Checks))
	defer func() {
		// A fresh context: the probe must go even when ctx was cancelled.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = sv.removeContainer(rctx, resp.ID, name)
	}()
	for _, n := range rp.networks[min(1, len(rp.networks)):] {
		if err := cli.NetworkConnect(ctx, n, resp.ID, &network.EndpointSettings{}); err != nil {
			return fmt.Errorf("probe %s: network connect %s: %w", rp.Role, n, err)
		}
	}
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return fmt.Errorf("probe %s: container start: %w", rp.Role, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Duration(len(rp.Checks)+5)*o.Timeout+10*time.Second)
	defer cancel()
	waitC, errC := cli.ContainerWait(wctx, resp.ID, container.WaitConditionNotRunning)
	select {
	case <-waitC:
	case err := <-errC:
		return fmt.Errorf("probe %s: wait: %w", rp.Role, err)
	}
	rc, err := cli.ContainerLogs(ctx, resp.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return fmt.Errorf("probe %s: logs: %w", rp.Role, err)
	}
	defer func() { _ = rc.Close() }() // read-only stream
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, rc); err != nil {
		return fmt.Errorf("probe %s: logs: %w", rp.Role, err)
	}
	var results []probe.Result
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r probe.Result
		if err := json.Unmarshal(sc.Bytes(), &r); err == nil {
			results = append(results, r)
		}
	}
	if len(results) != len(rp.Rows) {
		return fmt.Errorf("probe %s: %d results for %d checks (does %s contain agent-runner with the probe command?): %s",
			rp.Role, len(results), len(rp.Rows), o.Image, strings.TrimSpace(stderr.String()))
	}
	for i, r := range results {
		rp.Rows[i].Observed, rp.Rows[i].Detail = r.Observed, r.Detail
		rp.Rows[i].Pass = topospec.Passes(rp.Rows[i].Expected, r.Observed, false)
	}
	return nil
}

// Violations lists containers attached to the topology's networks in a way
// the spec forbids: anything but the proxy on egressnet, the proxy on
// llmnet, a container on fetchnet without llmnet (no role has that), and a
// container labelled with a role on a network its role must not join.
func Violations(ctx context.Context, cli client.APIClient, s topospec.Spec) ([]string, error) {
	members, err := Members(ctx, cli, s)
	if err != nil {
		return nil, err
	}
	kindOf := map[string]string{}
	for _, n := range s.Docker.Networks {
		kindOf[n.Name] = n.Kind
	}
	var out []string
	// topospec.Probe containers are judged like any other: they keep to their role's
	// networks, and exempting a label anyone can set would let a container
	// hide on egressnet by wearing it.
	for _, c := range members {
		name := strings.TrimPrefix(firstOr(c.Names, c.ID), "/")
		on := map[string]bool{}
		if c.NetworkSettings != nil {
			for n := range c.NetworkSettings.Networks {
				if k, ok := kindOf[n]; ok {
					on[k] = true
				}
			}
		}
		isProxy := name == topospec.ProxyName(s.Name) && c.Labels[LabelTopology] == s.Name
		switch {
		case on[topospec.EgressNet] && !isProxy:
			out = append(out, fmt.Sprintf("%s is on %s; only the proxy may be", name, NetworkName(s.Name, topospec.EgressNet)))
		case isProxy && on[topospec.LLMNet]:
			out = append(out, fmt.Sprintf("the proxy %s is on %s; it must only join fetchnet and egressnet", name, NetworkName(s.Name, topospec.LLMNet)))
		case !isProxy && on[topospec.FetchNet] && !on[topospec.LLMNet]:
			out = append(out, fmt.Sprintf("%s is on fetchnet without llmnet, which no role allows", name))
		}
		v6, err := enablesIPv6(ctx, cli, c.ID)
		if err != nil {
			return nil, err
		}
		if v6 {
			out = append(out, fmt.Sprintf("%s enables IPv6 (a net.ipv6 disable_ipv6=0 sysctl) on networks without it: "+
				"it can reach the host over the bridge's link-local address, which the IPv4 host firewall does not cover", name))
		}
		if role := c.Labels[LabelRole]; role != "" && !isProxy {
			allowed := map[string]bool{}
			for _, k := range RoleNetworks[role] {
				allowed[k] = true
			}
			var bad []string
			for k := range on {
				if !allowed[k] {
					bad = append(bad, k)
				}
			}
			sort.Strings(bad)
			if len(bad) > 0 {
				out = append(out, fmt.Sprintf("%s (role %s) is on %s, which %s must not join", name, role, strings.Join(bad, ", "), role))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// enablesIPv6 reports whether a container turns IPv6 back on with a
// sysctl. Docker disables IPv6 inside containers whose networks have none
// (observed on 20.10: net.ipv6.conf.all.disable_ipv6 = 1), which is what
// keeps ThreeGate members off IPv6; a member that sets it to 0 gets
// link-local addresses and can reach a host service listening on [::].
// A container gone meanwhile is not a member any more.
func enablesIPv6(ctx context.Context, cli client.APIClient, id string) (bool, error) {
	c, err := cli.ContainerInspect(ctx, id)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("container inspect %s: %w", id, err)
	}
	if c.HostConfig == nil {
		return false, nil
	}
	for k, v := range c.HostConfig.Sysctls {
		if strings.HasPrefix(k, "net.ipv6.conf.") && strings.HasSuffix(k, ".disable_ipv6") && strings.TrimSpace(v) == "0" {
			return true, nil
		}
	}
	return false, nil
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

// addrStrings is each address as Docker's HostConfig takes it.
func addrStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}
