package main

import "testing"

// A sandbox made for one role refuses a request for another: a request
// written into the wrong pod cannot widen its tools.
func TestRequestRole(t *testing.T) {
	for _, tc := range []struct {
		flag, role string
		ok         bool
	}{
		{"", "tool_exec", true}, // no --role: the runner alone hands requests (Docker, host mode)
		{"fetch", "fetch", true},
		{"fetch", "tool_exec", false},
		{"fetch", "", false},
		{"none", "", true},
		{"none", "core", false},
		{"core", "core", true},
	} {
		err := requestRole([]byte(`{"role":"`+tc.role+`"}`), tc.flag)
		if (err == nil) != tc.ok {
			t.Errorf("--role=%q, request role %q: %v", tc.flag, tc.role, err)
		}
	}
	for _, bad := range []string{"admin", "CORE"} {
		if checkRoleFlag(bad) == nil {
			t.Errorf("--role=%s accepted", bad)
		}
	}
}
