package agentspec

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

// ValidateFileAccess checks a file_access block without touching the
// filesystem, for plan time and for a host backend before it compiles the
// block (landlock.Compile): every path absolute and clean, no deny beside
// unrestricted. Every problem is a *fault.FieldError at file_access.<list> and
// the entry's index; they are joined.
func ValidateFileAccess(fa landlock.FileAccess) error {
	var errs []error
	check := func(list string, paths []string) {
		for i, p := range paths {
			bad := func(msg string) {
				errs = append(errs, &fault.FieldError{Field: "file_access." + list, Index: i, Err: fmt.Errorf("%q: %s", p, msg)})
			}
			switch {
			case p == "":
				bad("a path must not be empty")
			case !filepath.IsAbs(p):
				bad("the path must be absolute (start with /)")
			case strings.ContainsRune(p, 0):
				bad("the path must not contain NUL")
			case filepath.Clean(p) != p:
				bad(fmt.Sprintf("the path must be clean (no `.` or `..` elements, no `//`, no trailing `/`); write %q", filepath.Clean(p)))
			}
		}
	}
	check("allow_read", fa.AllowRead)
	check("allow_read_write", fa.AllowReadWrite)
	check("deny", fa.Deny)
	if fa.Unrestricted && len(fa.Deny) > 0 {
		errs = append(errs, &fault.FieldError{Field: "file_access.deny", Index: -1, Err: errors.New("deny has no effect with unrestricted = true; remove one of them")})
	}
	return errors.Join(errs...)
}
