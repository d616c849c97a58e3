package escape

import (
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	s := Scenarios[0]
	for _, c := range []struct {
		sandbox, control Probe
		want             string
	}{
		{Probe{"held", "EPERM"}, Probe{"escaped", "ok"}, Held},
		{Probe{"escaped", "ok"}, Probe{"escaped", "ok"}, Escaped},
		// The sandbox escaping is an escape even when the control failed.
		{Probe{"escaped", "ok"}, Probe{"held", "EPERM"}, Escaped},
		{Probe{"held", "EPERM"}, Probe{"unsupported", "ENOSYS"}, NotReproduced},
		{Probe{"held", "EPERM"}, Probe{"held", "EPERM"}, NotReproduced},
		// No answer from the sandbox's probe is no escape, but says so.
		{Probe{}, Probe{"escaped", "ok"}, Held},
	} {
		if r := Judge(s, ModeNone, "runc", c.sandbox, c.control); r.Result != c.want {
			t.Errorf("Judge(%v, %v) = %s, want %s", c.sandbox, c.control, r.Result, c.want)
		}
	}
	if r := Judge(s, ModeHost, "-", Probe{}, Probe{"escaped", "ok"}); r.Layer != s.Host || !strings.Contains(r.Detail, "no answer") {
		t.Errorf("host row: %+v", r)
	}
}

// The page's table reads back into the same keys, pipes in cells and all,
// and a changed result changes its key.
func TestTableRoundTrip(t *testing.T) {
	rows := []Row{
		{"a | b", "layer", ModeNone, "runc", Held, "x|y"},
		{"c", "layer {x}", ModeHost, "-", NotReproduced, "why"},
	}
	got := ParseTable(Page(Versions{Date: "d"}, rows))
	if len(got) != 2 || got[0] != rows[0].Key() || got[1] != rows[1].Key() {
		t.Fatalf("ParseTable = %q, want the rows' keys", got)
	}
	flipped := rows[0]
	flipped.Result = Escaped
	if flipped.Key() == got[0] {
		t.Error("a changed result kept its key")
	}
	if p := ParseProbe("mount\theld\tEPERM\nexit 0\njunk\n"); len(p) != 1 || p["mount"].State != "held" {
		t.Errorf("ParseProbe = %v", p)
	}
}
