package sandbox

import (
	"slices"
	"testing"
)

// On named networks the engine's resolver gets the given upstream and no
// search domain; without networks (none, bridge) DNS is left alone.
func TestHardenedSpecDNS(t *testing.T) {
	s := testSpec()
	s.Networks, s.DNS = []string{"tg-llmnet"}, []string{"10.213.1.127"}
	_, hc, _, err := HardenedSpec(s, "m")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(hc.DNS, []string{"10.213.1.127"}) || !slices.Equal(hc.DNSSearch, []string{"."}) {
		t.Errorf("DNS %v search %v", hc.DNS, hc.DNSSearch)
	}
	s.DNS = []string{"sink"}
	if _, _, _, err := HardenedSpec(s, "m"); err == nil {
		t.Error("a DNS upstream that is not an address was accepted")
	}
	s.Networks, s.Network, s.DNS = nil, "none", []string{"10.213.1.127"}
	if _, hc, _, _ := HardenedSpec(s, "m"); hc.DNS != nil || hc.DNSSearch != nil {
		t.Errorf("network none: DNS %v search %v", hc.DNS, hc.DNSSearch)
	}
}
