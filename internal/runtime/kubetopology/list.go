package kubetopology

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// List is topospec.Backend's: every topology of the namespace by the
// labels of its proxy Deployment and its NetworkPolicies. One whose proxy
// Deployment is there can be imported; policies left without one are an
// orphan.
func (b *Backend) List(ctx context.Context) ([]topospec.Listed, error) {
	sv, err := b.service()
	if err != nil {
		return nil, err
	}
	ns, cs := sv.c.Namespace, sv.c.Clientset
	sel := metav1.ListOptions{LabelSelector: kube.ThreeGateLabelManagedBy + "=" + engine.ManagedByValue + "," + kube.ThreeGateLabelTopology}
	deps, err := cs.AppsV1().Deployments(ns).List(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("listing the topologies' proxy deployments in namespace %s: %w", ns, err)
	}
	pols, err := cs.NetworkingV1().NetworkPolicies(ns).List(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("listing the topologies' network policies in namespace %s: %w", ns, err)
	}
	withProxy := map[string]bool{}
	for _, d := range deps.Items {
		if name := d.Labels[kube.ThreeGateLabelTopology]; d.Name == topospec.ProxyName(name) {
			withProxy[name] = true
		}
	}
	left := map[string][]string{}
	for _, p := range pols.Items {
		if name := p.Labels[kube.ThreeGateLabelTopology]; !withProxy[name] {
			left[name] = append(left[name], p.Name)
		}
	}
	var out []topospec.Listed
	for name := range withProxy {
		out = append(out, topospec.Listed{Name: name})
	}
	for name, ps := range left {
		slices.Sort(ps)
		out = append(out, topospec.Listed{Name: name, Orphan: fmt.Sprintf("its NetworkPolicies %s are left without its proxy Deployment %s: "+
			"remove them (kubectl -n %s delete networkpolicy %s)", strings.Join(ps, ", "), topospec.ProxyName(name), ns, strings.Join(ps, " "))})
	}
	slices.SortFunc(out, func(a, b topospec.Listed) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
