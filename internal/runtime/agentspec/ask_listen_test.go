package agentspec

import "testing"

// An ask target's listen address is where the target's token is sent.
func TestValidAskListen(t *testing.T) {
	for s, want := range map[string]bool{
		"unix:///s/runners/te/run/runner.sock": true,
		"127.0.0.1:8080":                       true,
		"127.0.0.1:1@evil.example:80":          false,
		"localhost:80":                         false,
		"127.0.0.1:0":                          false,
		"127.0.0.1:08080":                      false,
		"unix://relative.sock":                 false,
		"unix:///s/../etc/x.sock":              false,
		"10.0.0.5:80":                          false,
	} {
		if validAskListen(s) != want {
			t.Errorf("validAskListen(%q) = %v, want %v", s, !want, want)
		}
	}
}
