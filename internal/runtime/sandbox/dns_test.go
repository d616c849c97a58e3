package sandbox

import (
	"slices"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// On named networks the engine's resolver gets the given upstream and no
// search domain; without networks (none, bridge) DNS is left alone.
func TestHardenedSpecDNS(t *testing.T) {
	s := testSpec()
	sink, err := agentspec.ParseAddr("10.213.1.127")
	if err != nil {
		t.Fatal(err)
	}
	s.Networks, s.DNS = []string{"tg-llmnet"}, []agentspec.Addr{sink}
	_, hc, _, err := HardenedSpec(s, "m")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(hc.DNS, []string{"10.213.1.127"}) || !slices.Equal(hc.DNSSearch, []string{"."}) {
		t.Errorf("DNS %v search %v", hc.DNS, hc.DNSSearch)
	}
	// A DNS upstream that is not an address is refused where it is read
	// (agentspec.ParseAddr, TestLoadRefusesBadSize), before a spec has it.
	s.Networks, s.Network = nil, "none"
	if _, hc, _, _ := HardenedSpec(s, "m"); hc.DNS != nil || hc.DNSSearch != nil {
		t.Errorf("network none: DNS %v search %v", hc.DNS, hc.DNSSearch)
	}
}
