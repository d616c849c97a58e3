package logging

import (
	"reflect"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// The runner hands its hclog.Logger to the services as it is.
var _ Logger = hclog.NewNullLogger()

func TestFields(t *testing.T) {
	got := Fields([]any{"name", "tg-llmnet", 7, "seven", "lonely"})
	want := map[string]any{"name": "tg-llmnet", "7": "seven", "EXTRA_VALUE_AT_END": "lonely"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Fields = %v, want %v", got, want)
	}
	if Fields(nil) != nil {
		t.Fatal("Fields(nil) must be nil")
	}
}

func TestOr(t *testing.T) {
	if _, ok := Or(nil).(Nop); !ok {
		t.Fatal("Or(nil) must be Nop")
	}
	l := hclog.NewNullLogger()
	if Or(l) != l {
		t.Fatal("Or(l) must be l")
	}
}
