package kubedeploy

import (
	"context"
	"fmt"

	netv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// An agent outside a topology gets on a cluster what container_mode.network
// gives it on Docker. A pod always joins the cluster network, so the
// agent's message pods are put under one NetworkPolicy of their own:
//
//	"none"   nothing in, nothing out (no DNS either);
//	"bridge" nothing in; out to public addresses only, and the cluster's
//	         DNS (kept by design: a bridge agent is no ThreeGate member
//	         and may reach the internet anyway, so its names resolve as a
//	         bridge container's do; members get none, kube.MemberDNS):
//	         never the cluster's pods, services, nodes or API server,
//	         private or link-local space (the metadata service), as the
//	         managed bridge keeps a container from the host, the other
//	         containers and 169.254/16 (kube.OutboundEgress).
//
// The runner pod is not selected (it drives the API and relays the model
// calls, as on Docker). The runner cannot see the policy: it makes each of
// these pods wait until the API server is blocked before agent-run reads
// its request (kube.PolicyProbe), so a pod the policy does not cover yet
// never runs a message. A topology member's pods are governed by the
// topology's policies instead.

// LabelMessagePolicy names, on a MessagePolicy, the agent it confines; the
// agent's teardown finds its policy by it.
const LabelMessagePolicy = engine.LabelPrefix + "message-policy-agent"

// MessagePolicy confines the agent's message pods (those kube.AgentSelector
// selects: the ones kube.HardenedPod makes for this agent, prestarted or
// not, never its runner pod, whose component label differs) for network
// "none" or "bridge"; "bridge" needs the cluster's addresses.
func MessagePolicy(n Names, ns, agentID, network string, cluster kube.ClusterNetwork) (*netv1.NetworkPolicy, error) {
	sel, err := metav1.ParseToLabelSelector(kube.AgentSelector(agentID))
	if err == nil && len(sel.MatchExpressions) > 0 {
		err = fmt.Errorf("%q is not a set of labels", kube.AgentSelector(agentID))
	}
	if err != nil {
		return nil, fmt.Errorf("selector of the message pods of %s: %w", agentID, err)
	}
	var egress []netv1.NetworkPolicyEgressRule
	switch network {
	case "", "none":
	case "bridge":
		if egress, err = kube.OutboundEgress(cluster); err != nil {
			return nil, fmt.Errorf("the outbound policy of %s: %w", agentID, err)
		}
	default:
		return nil, fmt.Errorf("network %q: a cluster has none of that name (use \"none\" or \"bridge\", or a threegate topology)", network)
	}
	m := meta(n.Base+"-messages", ns, agentID)
	m.Labels[LabelMessagePolicy] = agentID
	return &netv1.NetworkPolicy{
		ObjectMeta: m,
		Spec: netv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: sel.MatchLabels},
			// Both types: no ingress rule means nothing comes in.
			PolicyTypes: []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress},
			Egress:      egress,
		},
	}, nil
}

// messagePolicy is the policy a's message pods need now, nil for a
// topology member.
func (s *Service) messagePolicy(ctx context.Context, c *agentspec.Config) (*netv1.NetworkPolicy, error) {
	if !agentspec.OwnPolicy(c) {
		return nil, nil
	}
	var cluster kube.ClusterNetwork
	if c.Container.Network == "bridge" {
		var err error
		if cluster, err = kube.DiscoverCluster(ctx, s.o.Client); err != nil {
			return nil, err
		}
	}
	return MessagePolicy(NamesFor(c.AgentID), s.o.Client.Namespace, c.AgentID, c.Container.Network, cluster)
}

// applyMessagePolicy makes (or restores) the policy of the agent's message
// pods. Apply calls it before the runner that makes those pods rolls; a
// policy the agent no longer needs (it joined a topology) is removed only
// once the new runner runs (removeMessagePolicy), so no pod of the old
// config loses it early.
func (s *Service) applyMessagePolicy(ctx context.Context, a Agent) error {
	pol, err := s.messagePolicy(ctx, &a.Config)
	if err != nil {
		return stepErr(StepObjects, "container_mode.network", "the message pods' network policy", err)
	}
	if pol == nil {
		return nil
	}
	if err := upsert(ctx, s.o.Client.Clientset.NetworkingV1().NetworkPolicies(pol.Namespace), pol, nil); err != nil {
		return stepErr(StepObjects, "", "applying NetworkPolicy "+pol.Name, err)
	}
	s.log.Info("message pods' policy applied", "agent_id", a.Config.AgentID, "policy", pol.Name, "network", a.Config.Container.Network)
	return nil
}

// removeMessagePolicy deletes the agent's message policy, if any.
func (s *Service) removeMessagePolicy(ctx context.Context, id string) error {
	return s.deletePolicies(ctx, LabelMessagePolicy+"="+id, "message pods' policy", id)
}

// readMessagePolicy adds the message policy of an agent that needs one to
// o.Missing when it is gone and to o.Changed when it was edited: either
// widens what the agent's pods reach (their wait for the policy then
// fails every message, closed), and the next apply restores it.
func (s *Service) readMessagePolicy(ctx context.Context, c *agentspec.Config, o *Observed) error {
	want, err := s.messagePolicy(ctx, c)
	if err != nil || want == nil {
		return err
	}
	live, err := s.o.Client.Clientset.NetworkingV1().NetworkPolicies(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
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
