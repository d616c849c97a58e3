package firewall

import "testing"

func TestNamesThatGoIntoRules(t *testing.T) {
	for s, want := range map[string]bool{"tg": true, "meepa-bridge": true, "a b": false, "x\n-I DOCKER-USER 1 -j ACCEPT": false, "": false, "-x": false} {
		if ValidName(s) != want {
			t.Errorf("ValidName(%q) = %v", s, !want)
		}
	}
	for s, want := range map[string]bool{"meepa-br0": true, "br-0123456789ab": true, "eth0\n-A INPUT -j ACCEPT": false, "waytoolonginterface": false, "": false} {
		if ValidInterface(s) != want {
			t.Errorf("ValidInterface(%q) = %v", s, !want)
		}
	}
}
