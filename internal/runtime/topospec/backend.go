package topospec

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
)

// The backends' kinds.
const (
	KindDocker     = "docker"
	KindKubernetes = "kubernetes"
)

// Backend is one place topologies run: package topology (a Docker host and
// its iptables) or package kubetopology (a namespace of a cluster). The
// provider picks one when it is configured and drives every topology
// through it; nothing above it asks which it is.
type Backend interface {
	// Plan validates in and plans the topology, offline. What this backend
	// cannot do is a Problem on the attribute that asks for it, from the
	// same check Apply runs on the spec it is handed.
	Plan(in Input) (Spec, fault.List)
	// Planned is what the spec decides before anything is applied.
	Planned(s Spec) Planned
	// Compare says what moving a live topology from old to new keeps;
	// drifted says the live topology was found to differ from old.
	Compare(old, new Spec, drifted bool) Change
	// Preflight checks, at plan, what the backend's host can tell before
	// apply (free subnets, a firewall to write). A backend with nothing
	// to ask returns nothing.
	Preflight(ctx context.Context, s Spec) (fault.List, error)
	// Apply brings the backend to s and reads it back; only what differs
	// changes. It writes the record of s with the proxy.
	Apply(ctx context.Context, s Spec) (Status, error)
	// Read observes the topology of s and lists its drift.
	Read(ctx context.Context, s Spec) (Status, error)
	// Import reads the topology called name back from its record (or,
	// for one made before records, from what its objects show). A
	// *NotFoundError means there is none.
	Import(ctx context.Context, name string) (Spec, error)
	// Teardown removes the topology called name and nothing else; members
	// left are an error that names them.
	Teardown(ctx context.Context, name string) error
	// Verify runs probes in each role and compares what they reach with
	// what s allows.
	Verify(ctx context.Context, s Spec, o VerifyOptions) (Report, error)
	// Kind names the backend (KindDocker, KindKubernetes): part of a
	// topology's identity, since one name can exist on both.
	Kind() string
	// List finds the topologies this backend holds by the provider's own
	// labels, in name order: the importable ones and what is left of one
	// that is not.
	List(ctx context.Context) ([]Listed, error)
}

// Listed is one topology a backend holds, as List finds it.
type Listed struct {
	Name string
	// Orphan, when set, says why the topology cannot be imported (its
	// proxy is gone, its networks or policies are left) and what removes
	// what is left.
	Orphan string
}

// Role is what a member of a role joins and what it sets in its
// environment. On a cluster a member is placed by its labels and has no
// networks to join.
type Role struct {
	Networks       []string          // Docker network names
	Env            map[string]string // environment for the role's container
	SandboxNetwork string            // network of the execution sandbox; "" = the role's networks
	// DNS is the upstream a member's engine resolver forwards to (Docker's
	// HostConfig.DNS): the topology's DNS sink.
	DNS []netip.Addr
}

// Planned is what a spec decides before apply. An empty string or a nil
// list means the value is known only after apply.
type Planned struct {
	// ProxyURL is what FETCH sets as http_proxy.
	ProxyURL string
	// ProxyID names the proxy object, when the name alone decides it.
	ProxyID string
	// Rules are the enforcement as data (firewall rule lines); Restore
	// the same as iptables-restore input.
	Rules   []string
	Restore string
	// Networks are the planned networks when they are known before apply
	// (none, on a cluster); nil: after apply.
	Networks map[string]NetworkStatus
	Roles    map[string]Role
}

// Change is what moving a live topology from one spec to another does to
// its objects.
type Change struct {
	KeepNetworks bool     // every network stays as it is
	KeepProxy    bool     // and so does the proxy
	Opens        []string // what the change widens, in words
}

// NetworkStatus is one live Docker network of the topology.
type NetworkStatus struct {
	ID, Name, Subnet, Gateway string
	Internal                  bool
}

// Status is what the backend shows of a topology.
type Status struct {
	// Gone is set when nothing of the topology is left.
	Gone bool
	// Networks are the live networks by kind (none on a cluster).
	Networks map[string]NetworkStatus
	// ProxyID is the proxy container's id ("" when missing), or on a
	// cluster the name of the proxy's Deployment.
	ProxyID string
	// ProxyURL is where FETCH reaches the proxy as last seen.
	ProxyURL string
	// Rules is the enforcement: the firewall rule lines, or on a cluster
	// the names of the live NetworkPolicies.
	Rules []string
	// Drift lists, in words, how the backend differs from the spec; empty
	// means in sync.
	Drift []string
}

// NotFoundError says a topology cannot be read back from its objects.
type NotFoundError struct {
	Name  string
	Where string // "Docker", "the cluster"
	Err   error
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("topology %q cannot be read from %s: %v", e.Name, e.Where, e.Err)
}
func (e *NotFoundError) Unwrap() error { return e.Err }
