package kubedeploy

import (
	"context"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// List is agentspec.Backend's: every agent of the namespace by the runner
// objects' labels. One with its config Secret can be imported; a
// Deployment left without one is an orphan.
func (b *Backend) List(ctx context.Context) ([]agentspec.Listed, error) {
	ns, cs := b.s.o.Client.Namespace, b.s.o.Client.Clientset
	sel := metav1.ListOptions{LabelSelector: engine.LabelManagedBy + "=" + engine.ManagedByValue + "," + engine.LabelComponent + "=" + kube.ComponentRunner}
	fail := func(err error) ([]agentspec.Listed, error) {
		return nil, stepErr(agentspec.StepList, "", "listing the agents in namespace "+ns, err)
	}
	byID := map[string]*agentspec.Listed{}
	secrets, err := cs.CoreV1().Secrets(ns).List(ctx, sel)
	if err != nil {
		return fail(err)
	}
	for _, s := range secrets.Items {
		if id := s.Labels[engine.LabelPrefix+"agent"]; workspace.ValidID(id) && s.Name == NamesFor(id).Base {
			byID[id] = &agentspec.Listed{ID: id, Status: agentspec.StatusMissing}
		}
	}
	deps, err := cs.AppsV1().Deployments(ns).List(ctx, sel)
	if err != nil {
		return fail(err)
	}
	for _, d := range deps.Items {
		id := d.Labels[engine.LabelPrefix+"agent"]
		if !workspace.ValidID(id) || d.Name != NamesFor(id).Base {
			continue
		}
		l := byID[id]
		if l == nil {
			l = &agentspec.Listed{ID: id, Orphan: "its runner Deployment " + ns + "/" + d.Name +
				" is left without its config Secret: delete the Deployment (kubectl -n " + ns + " delete deployment " + d.Name + ")"}
			byID[id] = l
		}
		l.Status = StatusNotReady
		if d.Status.ReadyReplicas > 0 {
			l.Status = agentspec.StatusRunning
		}
	}
	out := make([]agentspec.Listed, 0, len(byID))
	for _, l := range byID {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b agentspec.Listed) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
