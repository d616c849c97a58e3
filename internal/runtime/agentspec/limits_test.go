package agentspec

import "testing"

func TestMemoryBytes(t *testing.T) {
	for in, want := range map[string]int64{"512m": 512 << 20, "1g": 1 << 30, "": 512 << 20, "64M": 64 << 20, "1024k": 1 << 20 * 1} {
		got, err := MemoryBytes(in)
		if in == "1024k" {
			if err == nil {
				t.Errorf("%q: under 6m accepted", in)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("MemoryBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}
