package topology

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/logging"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// Service brings ThreeGate topologies up and down on one Docker daemon and
// this host's iptables, reads them back and imports them. It owns the
// order, so that every caller (the provider, the tests, the bench) gets the
// same guarantee: on the way up the networks come first, then the firewall,
// then the proxy, so no container of a topology ever runs before its rules;
// on the way down the proxy and the networks go first and the rules last,
// so they keep protecting any member until the end. Every network,
// container and rule set it creates, changes or removes is logged.
type Service struct {
	docker client.APIClient
	log    logging.Logger
}

// NewService returns the service for one daemon. log may be nil (nothing
// is logged).
func NewService(cli client.APIClient, log logging.Logger) *Service {
	return &Service{docker: cli, log: logging.Or(log)}
}

// HostStatus is what the host shows of a topology in its own terms;
// Apply and Read report it as a topospec.Status.
type HostStatus struct {
	Observed
	// RulesPresent is set when a chain of the topology exists in iptables.
	RulesPresent bool
	// GuardPresent is set when the topology's firewall guard container
	// exists: left alone it would keep putting the rules back.
	GuardPresent bool
	// Drift lists, in words, how the host differs from the spec; empty
	// means in sync.
	Drift []string
}

// Gone reports whether nothing of the topology is left on the host.
func (st HostStatus) Gone() bool {
	return len(st.Networks) == 0 && st.Proxy == nil && !st.RulesPresent && !st.GuardPresent
}

// topospec.Firewall operations, as FirewallError.Op names them.
const (
	FirewallOpen   = "open"   // iptables or DOCKER-USER missing; nothing was changed
	FirewallRead   = "read"   // the live rules could not be listed
	FirewallApply  = "apply"  // the rule set could not be loaded
	FirewallRemove = "remove" // the rule set could not be removed
)

// FirewallError is a failure of the host firewall rather than of Docker.
// Its text is the cause's, so callers word the context themselves.
type FirewallError struct {
	Op  string
	Err error
}

func (e *FirewallError) Error() string { return e.Err.Error() }
func (e *FirewallError) Unwrap() error { return e.Err }

// FirewallOp returns the firewall operation err failed in, or "" when err
// is not a firewall failure.
func FirewallOp(err error) string {
	var fe *FirewallError
	if errors.As(err, &fe) {
		return fe.Op
	}
	return ""
}

// FirewallAvailable reports, as the error Apply would return, whether this
// host can enforce a topology: iptables, iptables-restore and Docker's
// DOCKER-USER chain.
func FirewallAvailable(ctx context.Context) error {
	_, err := firewall.Open(ctx, nil)
	return err
}

// Apply brings the host to spec and reads it back. Only what differs is
// replaced. A disabled firewall has the rules of an earlier apply removed.
// A *FirewallError with Op FirewallOpen means nothing was touched; after
// any other error objects of the topology may exist. A Status with Drift
// means the host still differs after apply.
func (sv *Service) Apply(ctx context.Context, s topospec.Spec) (topospec.Status, error) {
	st, err := sv.ApplyHost(ctx, s)
	return st.neutral(s), err
}

// ApplyHost is Apply, reporting what the host shows in its own terms.
func (sv *Service) ApplyHost(ctx context.Context, s topospec.Spec) (HostStatus, error) {
	if err := checkSpec(s); err != nil {
		return HostStatus{}, err
	}
	var fw *firewall.Host
	if s.Docker.Firewall.Enabled {
		h, err := firewall.Open(ctx, sv.log)
		if err != nil {
			return HostStatus{}, &FirewallError{Op: FirewallOpen, Err: err}
		}
		fw = h
	}
	if err := sv.checkLocal(ctx, s); err != nil {
		return HostStatus{}, err
	}
	sv.log.Debug("applying threegate topology", "topology", s.Name, "firewall", s.Docker.Firewall.Enabled,
		"log_denied", s.Docker.Firewall.LogDenied)
	obs, err := sv.ensure(ctx, s, sv.withGuard(s, func(ctx context.Context) error {
		if fw != nil {
			return fw.Apply(ctx, Rules(s))
		}
		return sv.removeRules(ctx, s.Name)
	}))
	if err != nil {
		return HostStatus{}, err
	}
	return sv.status(ctx, s, obs)
}

// Read observes the networks, the proxy and the firewall of spec and lists
// their drift. A host without iptables is drift only when the firewall is
// enabled.
func (sv *Service) Read(ctx context.Context, s topospec.Spec) (topospec.Status, error) {
	st, err := sv.ReadHost(ctx, s)
	return st.neutral(s), err
}

// ReadHost is Read, reporting what the host shows in its own terms.
func (sv *Service) ReadHost(ctx context.Context, s topospec.Spec) (HostStatus, error) {
	if err := checkSpec(s); err != nil {
		return HostStatus{}, err
	}
	obs, err := Observe(ctx, sv.docker, s)
	if err != nil {
		return HostStatus{}, err
	}
	st, err := sv.status(ctx, s, obs)
	switch {
	case err != nil:
	case st.Gone():
		sv.log.Info("threegate topology not found on the host", "topology", s.Name)
	case len(st.Drift) > 0:
		sv.log.Warn("threegate drift", "topology", s.Name, "drift", st.Drift)
	}
	return st, err
}

// status adds the firewall's side to what Docker showed.
func (sv *Service) status(ctx context.Context, s topospec.Spec, obs Observed) (HostStatus, error) {
	st := HostStatus{Observed: obs, Drift: Drift(s, obs)}
	gd, present, err := guard.Drift(ctx, sv.docker, GuardWant(s))
	if err != nil {
		return st, err
	}
	st.Drift, st.GuardPresent = append(st.Drift, gd...), present
	h, err := firewall.Open(ctx, sv.log)
	if err != nil {
		if s.Docker.Firewall.Enabled {
			st.Drift = append(st.Drift, "the host firewall cannot be read: "+err.Error())
		}
		return st, nil
	}
	set := Rules(s)
	live, err := h.Read(ctx, set)
	if err != nil {
		return st, &FirewallError{Op: FirewallRead, Err: err}
	}
	st.RulesPresent = len(live.Chains) > 0
	if s.Docker.Firewall.Enabled {
		st.Drift = append(st.Drift, firewall.Diff(set, live)...)
	} else if st.RulesPresent {
		st.Drift = append(st.Drift, "the firewall is disabled but chains of this topology are still present")
	}
	return st, nil
}

// Teardown removes the topology called name: its proxy, its networks, then
// its firewall chains, and nothing else. Members still attached are an
// error that names them, raised before anything is removed. Missing
// objects are fine, so a half-made or half-removed topology goes too.
func (sv *Service) Teardown(ctx context.Context, name string) error {
	sv.log.Debug("removing threegate topology", "topology", name)
	if err := sv.destroy(ctx, named(name)); err != nil {
		return err
	}
	if err := sv.removeGuard(ctx, name); err != nil {
		return err
	}
	if err := sv.removeRules(ctx, name); err != nil {
		return &FirewallError{Op: FirewallRemove, Err: err}
	}
	return nil
}

// Import reads the topology called name back: the spec from the proxy's
// record (LiveSpec), the firewall settings from its chains. A
// *topospec.NotFoundError means its objects cannot be read.
func (sv *Service) Import(ctx context.Context, name string) (topospec.Spec, error) {
	s, err := LiveSpec(ctx, sv.docker, name)
	if err != nil {
		return s, err
	}
	s.Docker.Firewall = sv.liveFirewall(ctx, name)
	sv.log.Debug("threegate topology read from its objects", "topology", name, "allow_entries", len(s.Proxy.Allow),
		"firewall", s.Docker.Firewall.Enabled, "log_denied", s.Docker.Firewall.LogDenied)
	return s, nil
}

// liveFirewall infers the firewall settings from the chains: enabled when
// the forward chain exists, logging when it has a LOG rule. A host whose
// iptables cannot be read has no rules of ours.
func (sv *Service) liveFirewall(ctx context.Context, name string) topospec.Firewall {
	var f topospec.Firewall
	h, err := firewall.Open(ctx, sv.log)
	if err != nil {
		return f
	}
	live, err := h.Read(ctx, firewall.Build(firewall.Params{Name: name}))
	if err != nil {
		return f
	}
	rules, ok := live.Chains[firewall.ForwardChain(name)]
	f.Enabled = ok
	for _, l := range rules {
		f.LogDenied = f.LogDenied || strings.Contains(l, " -j LOG ")
	}
	return f
}

// removeRules removes the chains and jumps of the topology called name. No
// iptables (or no DOCKER-USER) means there are no rules of ours either.
func (sv *Service) removeRules(ctx context.Context, name string) error {
	h, err := firewall.Open(ctx, sv.log)
	if err != nil {
		return nil
	}
	// The chains and jumps depend on the name only.
	return h.Remove(ctx, firewall.Build(firewall.Params{Name: name}))
}

// named is the part of a topospec.Spec that the name alone decides: the names of
// the networks and of the proxy, all that finding and removing them needs.
func named(name string) topospec.Spec {
	s := topospec.Spec{Name: name}
	for _, k := range topospec.Kinds {
		s.Docker.Networks = append(s.Docker.Networks, topospec.Network{Kind: k, Name: NetworkName(name, k), Internal: k != topospec.EgressNet})
	}
	return s
}

// ensure brings Docker to spec: networks first, then firewall, then the
// proxy. Only what differs is replaced.
func (sv *Service) ensure(ctx context.Context, s topospec.Spec, applyRules func(context.Context) error) (Observed, error) {
	o, err := Observe(ctx, sv.docker, s)
	if err != nil {
		return o, err
	}
	replace, err := sv.networksToReplace(s, o)
	if err != nil {
		return o, err
	}
	var key []byte
	if o.Proxy != nil {
		key = o.Proxy.Key
	}
	if o.Proxy != nil && (len(replace) > 0 || !proxyConfigured(s, o.Proxy)) {
		sv.log.Debug("proxy container differs; replacing", "topology", s.Name, "container", topospec.ProxyName(s.Name), "id", o.Proxy.ID,
			"config", o.Proxy.Config, "want_config", ProxyConfigHash(s), "networks_replaced", len(replace))
		if err := sv.removeContainer(ctx, o.Proxy.ID, topospec.ProxyName(s.Name)); err != nil {
			return o, err
		}
		o.Proxy = nil
	}
	for _, n := range replace {
		if err := sv.removeNetwork(ctx, o.Networks[n.Kind].ID, n.Name); err != nil {
			return o, err
		}
		delete(o.Networks, n.Kind)
	}
	for _, n := range s.Docker.Networks {
		if _, ok := o.Networks[n.Kind]; ok {
			continue
		}
		if err := sv.createNetwork(ctx, s, n); err != nil {
			return o, err
		}
	}
	if err := applyRules(ctx); err != nil {
		return o, err
	}
	if o.Proxy != nil && !o.Proxy.Running {
		// Same configuration, only stopped: start it again.
		if err := sv.startProxy(ctx, o.Proxy.ID, topospec.ProxyName(s.Name)); err != nil {
			return o, err
		}
	} else if o.Proxy == nil {
		if err := sv.createProxy(ctx, s, key); err != nil {
			return o, err
		}
	}
	return Observe(ctx, sv.docker, s)
}

// networksToReplace lists the live networks that differ from spec. A
// network of that name that is not the topology's, or one that must be
// recreated while containers other than the proxy are on it, is an error.
func (sv *Service) networksToReplace(s topospec.Spec, o Observed) ([]topospec.Network, error) {
	var replace []topospec.Network
	for _, n := range s.Docker.Networks {
		on, ok := o.Networks[n.Kind]
		if !ok {
			continue
		}
		if !on.Owned {
			return nil, fmt.Errorf("network %s already exists and does not belong to topology %q (label %s); "+
				"remove it or choose another name", n.Name, s.Name, LabelTopology)
		}
		if networkMatches(n, on) {
			continue
		}
		if others := foreignEndpoints(on, o.Proxy); len(others) > 0 {
			return nil, fmt.Errorf("network %s must be recreated (subnet, gateway or internal flag changed) but containers "+
				"are attached: %s; detach or destroy them first", n.Name, strings.Join(others, ", "))
		}
		sv.log.Debug("network differs; replacing", "topology", s.Name, "network", n.Name, "id", on.ID,
			"subnet", on.Subnet, "want_subnet", n.Subnet.String(), "gateway", on.Gateway, "want_gateway", n.Gateway.String(),
			"internal", on.Internal, "want_internal", n.Internal)
		replace = append(replace, n)
	}
	return replace, nil
}

// destroy removes the proxy and the networks of a topology, and nothing
// else. Networks with containers still attached are an error that names
// them. Missing objects are fine.
func (sv *Service) destroy(ctx context.Context, s topospec.Spec) error {
	o, err := Observe(ctx, sv.docker, s)
	if err != nil {
		return err
	}
	// Refuse before removing anything, so a refused destroy leaves the
	// topology (and its firewall) whole for the members still on it.
	var attached []string
	for _, n := range s.Docker.Networks {
		if on, ok := o.Networks[n.Kind]; ok && on.Owned {
			for _, c := range foreignEndpoints(on, o.Proxy) {
				attached = append(attached, c+" (on "+n.Name+")")
			}
		}
	}
	if len(attached) > 0 {
		return fmt.Errorf("topology %s still has members attached: %s; detach or destroy them first", s.Name, strings.Join(attached, ", "))
	}
	var errs []error
	if o.Proxy != nil {
		errs = append(errs, sv.removeContainer(ctx, o.Proxy.ID, topospec.ProxyName(s.Name)))
	}
	for _, n := range s.Docker.Networks {
		on, ok := o.Networks[n.Kind]
		if !ok || !on.Owned {
			continue
		}
		errs = append(errs, sv.removeNetwork(ctx, on.ID, on.Name))
	}
	return errors.Join(errs...)
}
