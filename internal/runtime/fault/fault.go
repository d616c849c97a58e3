// Package fault holds the two error types a runtime package returns when
// the provider should say where a thing went wrong: FieldError, a setting
// at fault named by its attribute path (every check of what an owner
// writes, on either backend), and StepError, an operation that failed and
// the setting behind it when there is one. The provider turns both into
// diagnostics in one place. It imports only the standard library, so
// every package can stand on it.
package fault

import (
	"errors"
	"fmt"
)

// FieldError is a setting at fault. Field is its dotted path in the config
// file's terms ("container_mode.memory_limit", "proxy.allow"), which is
// also the attribute's path in the provider's schema (but for max_steps,
// which the schema keeps under llm); Index is a list entry, Key a map
// entry.
type FieldError struct {
	Field string
	// Index is the entry of a list, or -1.
	Index int
	// Key is the entry of a map, or "".
	Key string
	// Summary titles the error where its source has a title for it
	// ("Invalid Subnet"); "" leaves it to the reader.
	Summary string
	Err     error
}

// Fieldf is a titled FieldError on field (at list entry index, or -1)
// whose text is format with args.
func Fieldf(field string, index int, summary, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Index: index, Summary: summary, Err: fmt.Errorf(format, args...)}
}

// At is the field's path with its entry: "proxy.allow[2]", `secrets["k"]`.
func (e *FieldError) At() string {
	switch {
	case e.Index >= 0:
		return fmt.Sprintf("%s[%d]", e.Field, e.Index)
	case e.Key != "":
		return fmt.Sprintf("%s[%q]", e.Field, e.Key)
	}
	return e.Field
}

func (e *FieldError) Error() string { return e.At() + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// StepError says which step of a backend's lifecycle failed, on what, and
// the setting at fault when one is.
type StepError struct {
	// Step names the step in the backend's terms ("workspace create");
	// the provider titles the error by it unless Summary does.
	Step string
	// Summary is a Title Case headline, or "".
	Summary string
	// Field is the setting at fault (a FieldError's Field), or "".
	Field string
	// What is the object the step worked on ("making the workspace /s/a").
	What string
	Err  error
}

func (e *StepError) Error() string {
	if e.What == "" {
		return e.Err.Error()
	}
	return e.What + ": " + e.Err.Error()
}
func (e *StepError) Unwrap() error { return e.Err }

// List gathers field errors.
type List []*FieldError

// Add appends a titled field error at field (list entry index, or -1)
// whose text is format with args.
func (l *List) Add(field string, index int, summary, format string, args ...any) {
	*l = append(*l, Fieldf(field, index, summary, format, args...))
}

// Err is nil for an empty list, else every error joined, each still
// found by errors.As.
func (l List) Err() error {
	if len(l) == 0 {
		return nil
	}
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errors.Join(errs...)
}
