package kubedeploy

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// The model endpoint of an agent: the base URL's address and port (the
// scheme's default when it names none), nothing for the offline provider,
// and an error for what no policy can name.
func TestLLMEndpoint(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		llm   agent.LLMConfig
		cidrs []string
		ports []int
		err   string
	}{
		"offline":         {llm: agent.LLMConfig{Provider: "offline"}},
		"openai on an IP": {llm: agent.LLMConfig{Provider: "openai", BaseURL: "http://192.0.2.7:11434/v1"}, cidrs: []string{"192.0.2.7/32"}, ports: []int{11434}},
		"anthropic https": {llm: agent.LLMConfig{Provider: "anthropic", BaseURL: "https://198.51.100.4/"}, cidrs: []string{"198.51.100.4/32"}, ports: []int{443}},
		"plain http":      {llm: agent.LLMConfig{Provider: "openai", BaseURL: "http://203.0.113.9/v1"}, cidrs: []string{"203.0.113.9/32"}, ports: []int{80}},
		"no host":         {llm: agent.LLMConfig{Provider: "openai", BaseURL: "/v1"}, err: "not a URL with a host"},
		"IPv6 only":       {llm: agent.LLMConfig{Provider: "openai", BaseURL: "http://[2001:db8::1]/v1"}, err: "no IPv4 address"},
		"unresolvable":    {llm: agent.LLMConfig{Provider: "openai", BaseURL: "https://model.invalid/v1"}, err: "resolve model.invalid"},
	} {
		ep, err := LLMEndpoint(ctx, tc.llm)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", name, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.cidrs == nil:
			if ep != nil {
				t.Errorf("%s: endpoint %+v, want none", name, ep)
			}
		default:
			var got []string
			for _, c := range ep.CIDRs {
				got = append(got, c.String())
			}
			if !slices.Equal(got, tc.cidrs) || !slices.Equal(ep.Ports, tc.ports) {
				t.Errorf("%s: %v %v, want %v %v", name, got, ep.Ports, tc.cidrs, tc.ports)
			}
		}
	}
}

// Apply gives a topology member with a model its policy to the endpoint,
// and Remove takes it away; an offline member gets none.
func TestLLMPolicyLifecycle(t *testing.T) {
	svc, cs := fakeService()
	seedCluster(t, cs)
	ctx := context.Background()
	a := testAgent("thinker", "img", "")
	a.Config.Role, a.ThreegateNetwork = "core", "tg"
	a.Config.LLM = agent.LLMConfig{Provider: "openai", Model: "m", BaseURL: "http://192.0.2.7:11434/v1"}
	applyLLMPolicy := func(a Agent) error {
		ep, err := llmEndpoint(ctx, a)
		if err != nil {
			return err
		}
		return svc.applyLLMPolicy(ctx, a, ep)
	}
	if err := applyLLMPolicy(a); err != nil {
		t.Fatal(err)
	}
	list, err := cs.NetworkingV1().NetworkPolicies("agents").List(ctx, metav1.ListOptions{LabelSelector: kube.ThreeGateLabelAgent + "=thinker"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("model policies: %+v %v", list, err)
	}
	eg := list.Items[0].Spec.Egress
	if len(eg) != 1 || eg[0].To[0].IPBlock == nil || eg[0].To[0].IPBlock.CIDR != netip.MustParsePrefix("192.0.2.7/32").String() ||
		eg[0].Ports[0].Port.IntValue() != 11434 {
		t.Errorf("model policy egress %+v", eg)
	}
	a.Config.LLM = agent.LLMConfig{Provider: "offline"}
	if err := applyLLMPolicy(a); err != nil {
		t.Fatal(err)
	}
	if list, _ := cs.NetworkingV1().NetworkPolicies("agents").List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("an offline agent kept a model policy: %v", list.Items)
	}
}
