package topology

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// Every role's members get the sink as their only DNS upstream: the last
// address below llmnet's dynamic range, which nothing in the topology
// holds.
func TestRolesDNSSink(t *testing.T) {
	s, ps := Build(validInput())
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	sink := DNSSink(s)
	llm := s.Network(topospec.LLMNet)
	if sink.String() != "10.213.1.127" || !llm.Subnet.Contains(sink) || llm.IPRange.Contains(sink) {
		t.Fatalf("sink %s: want the last address of %s below %s", sink, llm.Subnet, llm.IPRange)
	}
	if sink == llm.Gateway || sink == s.Docker.ProxyIP || sink == s.Docker.EgressIP {
		t.Fatalf("sink %s is taken (gateway %s, proxy %s/%s)", sink, llm.Gateway, s.Docker.ProxyIP, s.Docker.EgressIP)
	}
	for name, r := range Roles(s) {
		if !slices.Equal(r.DNS, []netip.Addr{sink}) {
			t.Errorf("%s: DNS %v, want [%s]", name, r.DNS, sink)
		}
		if !slices.Contains(r.Networks, llm.Name) {
			t.Errorf("%s does not join llmnet, where the sink is: %v", name, r.Networks)
		}
	}
}

func TestGatewayMayNotBeTheSink(t *testing.T) {
	in := validInput()
	in.Docker.Gateways[topospec.LLMNet] = "10.213.1.127"
	_, ps := Build(in)
	if len(ps) != 1 || ps[0].Field != "llmnet_gateway" || ps[0].Summary != "Gateway Is The DNS Sink" {
		t.Fatalf("problems %v, want one on llmnet_gateway", ps)
	}
	in.Docker.Gateways[topospec.LLMNet] = "10.213.1.126"
	if _, ps := Build(in); len(ps) > 0 {
		t.Fatalf("another lower-half gateway refused: %v", ps)
	}
}
