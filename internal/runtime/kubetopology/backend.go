package kubetopology

import (
	"context"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// Backend is the cluster's topospec.Backend: planning needs no cluster;
// every other operation is the Service's in the namespace the client
// Dial returns is bound to.
type Backend struct {
	dial func() (*kube.Client, error)
	o    Options
}

var _ topospec.Backend = (*Backend)(nil)

// NewBackend returns the backend; dial is called at the first operation
// that needs the cluster.
func NewBackend(dial func() (*kube.Client, error), o Options) *Backend {
	return &Backend{dial: dial, o: o}
}

func (b *Backend) service() (*Service, error) {
	c, err := b.dial()
	if err != nil {
		return nil, &fault.StepError{Summary: "Kubernetes Unreachable", What: "connecting to the cluster", Err: err}
	}
	return NewService(c, b.o), nil
}

// Plan is Build.
func (b *Backend) Plan(in topospec.Input) (topospec.Spec, fault.List) { return Build(in) }

// Planned: the proxy Deployment's name follows from the topology's; the
// proxy pod's address and the policies' names are known after apply, and
// there are no networks to join (a member is placed by its labels).
func (b *Backend) Planned(s topospec.Spec) topospec.Planned {
	roles := map[string]topospec.Role{}
	for _, r := range []string{topospec.RoleCore, topospec.RoleFetch, topospec.RoleToolExec} {
		roles[r] = topospec.Role{Networks: []string{}, Env: map[string]string{}}
	}
	return topospec.Planned{ProxyID: topospec.ProxyName(s.Name), Networks: map[string]topospec.NetworkStatus{}, Roles: roles}
}

// Compare keeps the proxy (its pod and so its address) when its image and
// command stay and nothing drifted.
func (b *Backend) Compare(old, new topospec.Spec, drifted bool) topospec.Change {
	keep := !drifted && ConfigHash(old) == ConfigHash(new)
	return topospec.Change{KeepNetworks: true, KeepProxy: keep}
}

// Preflight asks nothing of the cluster: the plan stays offline.
func (b *Backend) Preflight(context.Context, topospec.Spec) (fault.List, error) {
	return nil, nil
}

// Apply is the Service's Apply.
func (b *Backend) Apply(ctx context.Context, s topospec.Spec) (topospec.Status, error) {
	sv, err := b.service()
	if err != nil {
		return topospec.Status{}, err
	}
	st, err := sv.Apply(ctx, s)
	return st.neutral(s), err
}

// Read is the Service's Read.
func (b *Backend) Read(ctx context.Context, s topospec.Spec) (topospec.Status, error) {
	sv, err := b.service()
	if err != nil {
		return topospec.Status{}, err
	}
	st, err := sv.Read(ctx, s)
	return st.neutral(s), err
}

// Import is the Service's Import.
func (b *Backend) Import(ctx context.Context, name string) (topospec.Spec, error) {
	sv, err := b.service()
	if err != nil {
		return topospec.Spec{}, err
	}
	return sv.Import(ctx, name)
}

// Teardown is the Service's Teardown.
func (b *Backend) Teardown(ctx context.Context, name string) error {
	sv, err := b.service()
	if err != nil {
		return err
	}
	return sv.Teardown(ctx, name)
}

// Verify is the Service's Verify.
func (b *Backend) Verify(ctx context.Context, s topospec.Spec, o topospec.VerifyOptions) (topospec.Report, error) {
	sv, err := b.service()
	if err != nil {
		return topospec.Report{}, err
	}
	return sv.Verify(ctx, s, o)
}

// neutral reports the cluster's status in the backend-neutral form: no
// networks, the policies as the enforcement, the proxy pod's URL.
func (st Status) neutral(s topospec.Spec) topospec.Status {
	out := topospec.Status{Gone: st.Gone(), Networks: map[string]topospec.NetworkStatus{}, ProxyID: topospec.ProxyName(s.Name),
		ProxyURL: st.ProxyURL, Rules: st.Policies, Drift: st.Drift}
	if out.Rules == nil {
		out.Rules = []string{}
	}
	return out
}

// Kind is topospec.KindKubernetes.
func (b *Backend) Kind() string { return topospec.KindKubernetes }
