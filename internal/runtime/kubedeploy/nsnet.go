package kubedeploy

import (
	"context"

	netv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// Every pod of an agents' namespace is under some NetworkPolicy: a pod
// that no policy selects may reach anything, so a pod made outside the
// topology (by hand, or by a taken-over runner before the admission policy
// existed) would be the way out. DefaultDenyPolicy selects every pod,
// labelled or not, and allows nothing; policies add up, so what the
// topology's, the model endpoint's and the message pods' policies allow
// still holds for the pods they select. A runner outside any topology
// keeps the open network it had (it drives the API and relays the model
// calls, as on Docker): OpenRunnerPolicy, for pods with a runner's labels
// and no topology, which only the provider's Deployments make (the
// admission policy refuses a runner such a pod).

// Names of the namespace-wide policies; shared by every agent, they stay
// when one is removed.
const (
	DefaultDenyPolicyName = "meepa-default-deny"
	OpenRunnerPolicyName  = "meepa-runners-outside-topologies"
)

// DefaultDenyPolicy isolates every pod of ns in both directions.
func DefaultDenyPolicy(ns string) *netv1.NetworkPolicy {
	return &netv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultDenyPolicyName, Namespace: ns, Labels: engine.Labels(kube.ComponentRunner, nil)},
		Spec: netv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress},
		},
	}
}

// OpenRunnerPolicy lets the runner pods of agents outside a topology
// reach, and be reached from, anything.
func OpenRunnerPolicy(ns string) *netv1.NetworkPolicy {
	return &netv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: OpenRunnerPolicyName, Namespace: ns, Labels: engine.Labels(kube.ComponentRunner, nil)},
		Spec: netv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{
				MatchLabels:      engine.Labels(kube.ComponentRunner, nil),
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: kube.ThreeGateLabelRunner, Operator: metav1.LabelSelectorOpDoesNotExist}},
			},
			PolicyTypes: []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress},
			Ingress:     []netv1.NetworkPolicyIngressRule{{}},
			Egress:      []netv1.NetworkPolicyEgressRule{{}},
		},
	}
}

// applyNamespacePolicies makes (or restores) both.
func (s *Service) applyNamespacePolicies(ctx context.Context) error {
	ns := s.o.Client.Namespace
	nps := s.o.Client.Clientset.NetworkingV1().NetworkPolicies(ns)
	for _, p := range []*netv1.NetworkPolicy{DefaultDenyPolicy(ns), OpenRunnerPolicy(ns)} {
		if err := upsert(ctx, nps, p, nil); err != nil {
			return stepErr(StepObjects, "", "applying NetworkPolicy "+p.Name, err)
		}
	}
	return nil
}
