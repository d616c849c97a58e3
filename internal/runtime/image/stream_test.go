package image

import (
	"fmt"
	"strings"
	"testing"
)

func TestReadStream(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&b, `{"stream":"line %d\n"}`+"\n", i)
	}
	ok := b.String() + `{"aux":{"ID":"sha256:abc"}}` + "\n"
	var logged []string
	id, err := readStream(strings.NewReader(ok), func(l string) { logged = append(logged, l) })
	if err != nil || id != "sha256:abc" || len(logged) != 30 || logged[29] != "line 30" {
		t.Fatalf("id %q err %v logged %d %q", id, err, len(logged), logged)
	}

	failed := b.String() + `{"stream":"\u001b[91mE: Unable to locate package nope\n\u001b[0m"}` + "\n" +
		`{"errorDetail":{"code":100,"message":"The command '/bin/sh -c apt-get install nope' returned a non-zero code: 100"},"error":"The command '/bin/sh -c apt-get install nope' returned a non-zero code: 100"}` + "\n"
	logged = nil
	_, err = readStream(strings.NewReader(failed), func(l string) { logged = append(logged, l) })
	for _, l := range logged {
		if strings.TrimSpace(l) == "" {
			t.Errorf("blank line logged: %q", logged)
		}
	}
	if err == nil {
		t.Fatal("a failed build passed")
	}
	msg := err.Error()
	for _, want := range []string{"returned a non-zero code: 100", "last lines of the build log", "E: Unable to locate package nope", "line 30"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "line 10\n") || strings.Contains(msg, "\x1b") {
		t.Errorf("error keeps more than the last %d lines, or colour codes:\n%s", tailLines, msg)
	}
}
