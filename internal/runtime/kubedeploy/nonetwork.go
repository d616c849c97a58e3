package kubedeploy

import (
	"context"
	"fmt"

	netv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
)

// An agent outside a topology with container_mode.network "none" gets on
// a cluster what it gets on Docker: message sandboxes that reach nothing.
// A pod always joins the cluster network, so the agent's message pods are
// put under one NetworkPolicy that selects them and allows nothing either
// way. The runner pod is not selected (it drives the API and relays the
// model calls, as on Docker). The runner cannot see the policy: it makes
// each of these pods wait until the API server is blocked before
// agent-run reads its request (runner.policyProbe), so a pod the policy
// does not cover yet never runs a message.

// LabelNoNetwork names, on a NoNetworkPolicy, the agent it confines; the
// agent's teardown finds its policy by it.
const LabelNoNetwork = engine.LabelPrefix + "no-network-agent"

// NoNetworkPolicy denies all ingress and egress of the agent's message
// pods: those kube.AgentSelector selects (the ones kube.HardenedPod makes
// for this agent, prestarted or not), never its runner pod, whose
// component label differs.
func NoNetworkPolicy(n Names, ns, agentID string) (*netv1.NetworkPolicy, error) {
	sel, err := metav1.ParseToLabelSelector(kube.AgentSelector(agentID))
	if err == nil && len(sel.MatchExpressions) > 0 {
		err = fmt.Errorf("%q is not a set of labels", kube.AgentSelector(agentID))
	}
	if err != nil {
		return nil, fmt.Errorf("selector of the message pods of %s: %w", agentID, err)
	}
	m := meta(n.Base+"-no-network", ns, agentID)
	m.Labels[LabelNoNetwork] = agentID
	return &netv1.NetworkPolicy{
		ObjectMeta: m,
		Spec: netv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: sel.MatchLabels},
			// Both types and no rule: nothing in, nothing out (no DNS either,
			// as with Docker's "none").
			PolicyTypes: []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress},
		},
	}, nil
}

// applyNoNetworkPolicy makes (or restores) the agent's deny-all policy when
// its message pods must reach nothing. Apply calls it before the runner
// that makes those pods rolls; a policy the agent no longer needs is
// removed only once the new runner runs (removeNoNetworkPolicy), so no
// pod of the old config loses it early.
func (s *Service) applyNoNetworkPolicy(ctx context.Context, a Agent) error {
	if !runner.NoNetwork(&a.Config) {
		return nil
	}
	id, ns := a.Config.AgentID, s.o.Client.Namespace
	pol, err := NoNetworkPolicy(NamesFor(id), ns, id)
	if err != nil {
		return stepErr(StepObjects, "container_mode.network", "the no-network policy", err)
	}
	if err := upsert(ctx, s.o.Client.Clientset.NetworkingV1().NetworkPolicies(ns), pol, nil); err != nil {
		return stepErr(StepObjects, "", "applying NetworkPolicy "+pol.Name, err)
	}
	s.log.Info("no-network policy applied", "agent_id", id, "policy", pol.Name)
	return nil
}

// removeNoNetworkPolicy deletes the agent's deny-all policy, if any.
func (s *Service) removeNoNetworkPolicy(ctx context.Context, id string) error {
	np := s.o.Client.Clientset.NetworkingV1().NetworkPolicies(s.o.Client.Namespace)
	list, err := np.List(ctx, metav1.ListOptions{LabelSelector: LabelNoNetwork + "=" + id})
	if err != nil {
		return stepErr(StepRemoveKube, "", "listing the no-network policy of "+id, err)
	}
	for _, p := range list.Items {
		if err := ignoreNotFound(np.Delete(ctx, p.Name, metav1.DeleteOptions{})); err != nil {
			return stepErr(StepRemoveKube, "", "deleting NetworkPolicy "+p.Name, err)
		}
		s.log.Info("no-network policy removed", "agent_id", id, "policy", p.Name)
	}
	return nil
}

// readNoNetworkPolicy adds the deny-all policy of an agent that needs one
// to o.Missing when it is gone and to o.Changed when its selector or
// types were edited: either widens what the agent's pods reach (their
// wait for the policy then fails every message, closed), and the next
// apply restores it.
func (s *Service) readNoNetworkPolicy(ctx context.Context, c *runner.Config, o *Observed) error {
	if !runner.NoNetwork(c) {
		return nil
	}
	want, err := NoNetworkPolicy(NamesFor(c.AgentID), s.o.Client.Namespace, c.AgentID)
	if err != nil {
		return err
	}
	live, err := s.o.Client.Clientset.NetworkingV1().NetworkPolicies(s.o.Client.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		o.Missing = append(o.Missing, "NetworkPolicy")
	case err != nil:
		return err
	case !equality.Semantic.DeepEqual(live.Spec, want.Spec):
		o.Changed = append(o.Changed, "NetworkPolicy")
	}
	return nil
}
