package agentspec

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

func TestValidateFileAccess(t *testing.T) {
	err := ValidateFileAccess(landlock.FileAccess{
		AllowRead:      []string{"/ok", "relative", ""},
		AllowReadWrite: []string{"/a/../b", "/trailing/"},
		Deny:           []string{"//double"},
		Unrestricted:   true,
	})
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *fault.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a *fault.FieldError", e)
		}
		got = append(got, fmt.Sprintf("%s[%d]", fe.Field, fe.Index))
	}
	want := []string{"file_access.allow_read[1]", "file_access.allow_read[2]", "file_access.allow_read_write[0]", "file_access.allow_read_write[1]", "file_access.deny[0]", "file_access.deny[-1]"}
	if !slices.Equal(got, want) {
		t.Errorf("fields\n got %q\nwant %q", got, want)
	}
	if !strings.Contains(err.Error(), `write "/b"`) {
		t.Errorf("the error should suggest the clean path: %v", err)
	}
	if err := ValidateFileAccess(landlock.FileAccess{AllowRead: []string{"/", "/srv/data"}, Deny: []string{"/srv/data/secret"}}); err != nil {
		t.Errorf("valid block: %v", err)
	}
}
