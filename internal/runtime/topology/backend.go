package topology

import (
	"context"
	"errors"
	"fmt"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/logging"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// Options configure the Docker backend. Host is the daemon's address as
// configured, for messages; Local says the daemon runs on this machine
// (a unix socket), so that this host's routes and iptables are the
// daemon's.
type Options struct {
	Host  string
	Local bool
}

// Dial returns the daemon's client; the backend calls it at the first
// operation that needs the daemon, so planning needs none.
type Dial func(ctx context.Context) (client.APIClient, error)

// Backend is the Docker topospec.Backend: planning needs nothing, every
// other operation is the Service's on the daemon Dial connects to.
type Backend struct {
	dial Dial
	log  logging.Logger
	o    Options
}

var _ topospec.Backend = (*Backend)(nil)

// NewBackend returns the backend for one daemon. dial may be nil for a
// backend that only plans.
func NewBackend(dial Dial, log logging.Logger, o Options) *Backend {
	return &Backend{dial: dial, log: logging.Or(log), o: o}
}

func (b *Backend) service(ctx context.Context) (*Service, error) {
	if b.dial == nil {
		return nil, errors.New("topology backend without a Docker daemon")
	}
	cli, err := b.dial(ctx)
	if err != nil {
		return nil, &fault.StepError{Summary: "Docker Daemon Unreachable", Err: err,
			What: fmt.Sprintf("The provider could not reach the Docker daemon at %s. Start the daemon, or point the provider's "+
				"docker_host (or DOCKER_HOST) at one that runs", b.o.Host)}
	}
	return NewService(cli, b.log), nil
}

// Plan builds in and adds what this host cannot do: a host firewall while
// the daemon runs on another machine (the rules would be written here and
// the containers would run there without them).
func (b *Backend) Plan(in topospec.Input) (topospec.Spec, fault.List) {
	s, ps := Build(in)
	return s, append(ps, b.refusals(s)...)
}

func (b *Backend) refusals(s topospec.Spec) fault.List {
	var ps fault.List
	if s.Docker.Firewall.Enabled && !b.o.Local {
		ps.Add("firewall.enabled", -1, "Host Firewall Needs A Local Docker Daemon",
			"docker_host is %s: a daemon reached over TCP may run on another machine (even on a loopback address it "+
				"can be a forwarded port), but the host firewall (iptables chains and the guard that restores them) is written on "+
				"the machine that runs terraform, so the topology's containers could run without it. Run terraform on the Docker host (docker_host unset or its unix:// socket), or set "+
				"firewall = { enabled = false } and enforce the topology on that host yourself (see iptables_restore).", b.o.Host)
	}
	return ps
}

// Planned: the proxy URL, the rule set and the roles follow from the spec;
// the networks and the proxy container get their ids at apply.
func (b *Backend) Planned(s topospec.Spec) topospec.Planned {
	p := topospec.Planned{ProxyURL: ProxyURL(s), Rules: []string{}, Roles: Roles(s)}
	if s.Docker.Firewall.Enabled {
		set := Rules(s)
		p.Rules, p.Restore = set.Lines(), set.RestoreText()
	}
	return p
}

// Compare is the package's Compare.
func (b *Backend) Compare(old, new topospec.Spec, drifted bool) topospec.Change {
	return Compare(old, new, drifted)
}

// Preflight asks the daemon for networks that overlap the plan, this host
// (when the daemon is local) for routes that do, checks iptables when the
// firewall is enabled and logs the engine's version.
func (b *Backend) Preflight(ctx context.Context, s topospec.Spec) (fault.List, error) {
	if len(b.refusals(s)) > 0 {
		return nil, nil
	}
	sv, err := b.service(ctx)
	if err != nil {
		return nil, err
	}
	ps, err := Conflicts(ctx, sv.docker, s, b.o.Local)
	if err != nil {
		return nil, &fault.StepError{Summary: "Cannot Check Subnets", What: "listing Docker networks and host routes", Err: err}
	}
	if s.Docker.Firewall.Enabled {
		if err := FirewallAvailable(ctx); err != nil {
			ps.Add("firewall.enabled", -1, "Host Firewall Unavailable", "%v", err)
		}
	}
	v, err := sv.docker.ServerVersion(ctx)
	if err != nil {
		return ps, &fault.StepError{Summary: "Cannot Read Docker Version", What: "asking the daemon for its version", Err: err}
	}
	// CVE-2024-29018 (an engine resolver forwarding internal networks'
	// queries from the host's namespace) needs no warning: every member's
	// resolver upstream is the topology's DNS sink on llmnet.
	if EngineLeaksDNS(v.Version) {
		b.log.Debug("engine affected by CVE-2024-29018; members forward unknown names only to the topology's DNS sink",
			"engine", v.Version, "dns_sink", DNSSink(s).String())
	}
	return ps, nil
}

// Apply is the Service's Apply, its failures worded for people: a
// firewall that cannot be opened is a failure of firewall.enabled, and
// nothing was touched.
func (b *Backend) Apply(ctx context.Context, s topospec.Spec) (topospec.Status, error) {
	if ps := b.refusals(s); len(ps) > 0 {
		return topospec.Status{}, &fault.StepError{Summary: ps[0].Summary, Field: ps[0].Field,
			What: "applying topology " + s.Name, Err: ps[0].Err}
	}
	sv, err := b.service(ctx)
	if err != nil {
		return topospec.Status{}, err
	}
	st, err := sv.Apply(ctx, s)
	switch FirewallOp(err) {
	case FirewallOpen:
		return st, &fault.StepError{Summary: "Host Firewall Unavailable", Field: "firewall.enabled", What: "opening the host firewall", Err: err}
	case FirewallRead:
		return st, &fault.StepError{Summary: "Firewall Read Failed", What: "reading back the rules of " + s.Name, Err: err}
	}
	return st, err
}

// Read is the Service's Read.
func (b *Backend) Read(ctx context.Context, s topospec.Spec) (topospec.Status, error) {
	sv, err := b.service(ctx)
	if err != nil {
		return topospec.Status{}, err
	}
	st, err := sv.Read(ctx, s)
	if FirewallOp(err) == FirewallRead {
		return st, &fault.StepError{Summary: "Firewall Read Failed", What: "reading the rules of " + s.Name, Err: err}
	}
	return st, err
}

// Import is the Service's Import.
func (b *Backend) Import(ctx context.Context, name string) (topospec.Spec, error) {
	sv, err := b.service(ctx)
	if err != nil {
		return topospec.Spec{}, err
	}
	return sv.Import(ctx, name)
}

// Teardown is the Service's Teardown.
func (b *Backend) Teardown(ctx context.Context, name string) error {
	sv, err := b.service(ctx)
	if err != nil {
		return err
	}
	err = sv.Teardown(ctx, name)
	if FirewallOp(err) != "" {
		return &fault.StepError{Summary: "ThreeGate Destroy Failed", What: "removing the firewall rules of " + name, Err: err}
	}
	return err
}

// Verify is the Service's Verify.
func (b *Backend) Verify(ctx context.Context, s topospec.Spec, o topospec.VerifyOptions) (topospec.Report, error) {
	sv, err := b.service(ctx)
	if err != nil {
		return topospec.Report{}, err
	}
	return sv.Verify(ctx, s, o)
}

// checkSpec refuses a spec that is not a Docker topology's (one planned
// by another backend, or a record that lost its networks) before anything
// is asked of the daemon. The values are typed; nothing is parsed.
func checkSpec(s topospec.Spec) error {
	var ps fault.List
	if s.Name == "" || len(s.Name) > topospec.MaxNameLen || !nameRE.MatchString(s.Name) {
		ps.Add("name", -1, "Invalid Topology Name", "%q is not a topology name", s.Name)
	}
	if len(s.Docker.Networks) != len(topospec.Kinds) {
		ps.Add("name", -1, "Not A Docker Topology", "topology %q has %d networks, a Docker topology has %d", s.Name, len(s.Docker.Networks), len(topospec.Kinds))
	}
	if !s.Docker.ProxyIP.IsValid() || !s.Docker.EgressIP.IsValid() {
		ps.Add("proxy.ip", -1, "Not A Docker Topology", "topology %q has no pinned proxy addresses", s.Name)
	}
	if s.Proxy.Image == "" || s.Proxy.Port < 1 || s.Proxy.Port > 65535 {
		ps.Add("proxy", -1, "Invalid Proxy", "topology %q: proxy image %q, port %d", s.Name, s.Proxy.Image, s.Proxy.Port)
	}
	return ps.Err()
}

// neutral reports the host's status in the backend-neutral form.
func (st HostStatus) neutral(s topospec.Spec) topospec.Status {
	out := topospec.Status{Gone: st.Gone(), Networks: map[string]topospec.NetworkStatus{}, Drift: st.Drift,
		ProxyURL: ProxyURL(s), Rules: []string{}}
	for _, n := range s.Docker.Networks {
		if on, ok := st.Networks[n.Kind]; ok {
			out.Networks[n.Kind] = topospec.NetworkStatus{ID: on.ID, Name: on.Name, Subnet: on.Subnet, Gateway: on.Gateway, Internal: on.Internal}
		}
	}
	if st.Proxy != nil {
		out.ProxyID = st.Proxy.ID
	}
	if s.Docker.Firewall.Enabled {
		out.Rules = Rules(s).Lines()
	}
	return out
}

// Kind is topospec.KindDocker.
func (b *Backend) Kind() string { return topospec.KindDocker }
