package kubedeploy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"

	netv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// An agent of a ThreeGate topology reaches nothing but what the topology's
// policies allow; its runner relays the model calls, so the runner's pod
// alone gets a way to the model endpoint: one NetworkPolicy per agent, to
// the base URL's addresses and port. A host name is resolved at apply and
// its addresses pinned in the policy (runners get no DNS); a model
// endpoint that moves needs another apply, and until then the calls fail
// rather than reach anything else. The runner pod finds the name at the
// pinned addresses through its hostAliases (kube.MemberHostAliases).

// LLMEndpoint is where an agent's model calls go: nothing for the offline
// provider.
func LLMEndpoint(ctx context.Context, llm agent.LLMConfig) (*kube.LLMEndpoint, error) {
	base := llm.BaseURL
	switch llm.Provider {
	case "openai":
		if base == "" {
			base = agent.DefaultOpenAIBaseURL
		}
	case "anthropic":
		if base == "" {
			base = agent.DefaultAnthropicBaseURL
		}
	default:
		return nil, nil
	}
	u, err := url.Parse(base)
	if err != nil || u.Hostname() == "" {
		return nil, fmt.Errorf("llm.base_url %q: not a URL with a host", base)
	}
	port := 443
	if u.Scheme == "http" {
		port = 80
	}
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("llm.base_url %q: bad port", base)
		}
	}
	ep := &kube.LLMEndpoint{Ports: []int{port}}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip4", u.Hostname()); err != nil {
		return nil, fmt.Errorf("llm.base_url: resolve %s for the agent's network policy: %w", u.Hostname(), err)
	} else {
		ep.Host = u.Hostname()
	}
	for _, a := range addrs {
		if a.Is4() {
			ep.CIDRs = append(ep.CIDRs, netip.PrefixFrom(a, 32))
		}
	}
	if len(ep.CIDRs) == 0 {
		return nil, fmt.Errorf("llm.base_url: %s has no IPv4 address; the cluster's policies are IPv4 only", u.Hostname())
	}
	return ep, nil
}

// llmEndpoint is the agent's model endpoint when it has a topology and a
// model, resolved once per apply: the policy (applyLLMPolicy) and the
// runner pod's hostAliases (applyObjects) are made from the same answer.
func llmEndpoint(ctx context.Context, a Agent) (*kube.LLMEndpoint, error) {
	if a.ThreegateNetwork == "" {
		return nil, nil
	}
	ep, err := LLMEndpoint(ctx, a.Config.LLM)
	if err != nil {
		return nil, stepErr(StepObjects, "llm.base_url", "the model endpoint's network policy", err)
	}
	return ep, nil
}

// applyLLMPolicy makes (or updates) the agent's model policy for ep (from
// llmEndpoint), and removes a stale one when ep is nil.
func (s *Service) applyLLMPolicy(ctx context.Context, a Agent, ep *kube.LLMEndpoint) error {
	id, ns := a.Config.AgentID, s.o.Client.Namespace
	if ep == nil {
		return s.removeLLMPolicy(ctx, id)
	}
	cluster, err := kube.DiscoverCluster(ctx, s.o.Client)
	if err != nil {
		return stepErr(StepObjects, "", "reading the cluster's networks", err)
	}
	pol, err := kube.AgentLLMPolicy(a.ThreegateNetwork, ns, id, Labels(id), *ep, cluster)
	if err != nil {
		return stepErr(StepObjects, "llm.base_url", "the model endpoint's network policy", err)
	}
	if err := upsert[*netv1.NetworkPolicy](ctx, s.o.Client.Clientset.NetworkingV1().NetworkPolicies(ns), &pol, nil); err != nil {
		return stepErr(StepObjects, "", "applying NetworkPolicy "+pol.Name, err)
	}
	s.log.Info("model endpoint policy applied", "agent_id", id, "policy", pol.Name, "cidrs", fmt.Sprint(ep.CIDRs), "ports", fmt.Sprint(ep.Ports))
	return nil
}

// removeLLMPolicy deletes the agent's model policies, if any.
func (s *Service) removeLLMPolicy(ctx context.Context, id string) error {
	return s.deletePolicies(ctx, kube.ThreeGateLabelAgent+"="+id, "model endpoint policy", id)
}

// deletePolicies deletes the agent's NetworkPolicies that selector finds
// (what names their kind in errors and logs).
func (s *Service) deletePolicies(ctx context.Context, selector, what, id string) error {
	np := s.o.Client.Clientset.NetworkingV1().NetworkPolicies(s.o.Client.Namespace)
	list, err := np.List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return stepErr(StepRemoveKube, "", "listing the "+what+" of "+id, err)
	}
	for _, p := range list.Items {
		if err := ignoreNotFound(np.Delete(ctx, p.Name, metav1.DeleteOptions{})); err != nil {
			return stepErr(StepRemoveKube, "", "deleting NetworkPolicy "+p.Name, err)
		}
		s.log.Info(what+" removed", "agent_id", id, "policy", p.Name)
	}
	return nil
}
