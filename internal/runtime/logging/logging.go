// Package logging is the logger the runtime services write to. It has the
// shape of hclog's leveled methods, so an hclog.Logger (the runner's) fits it
// as is, and the provider adapts tflog to it: the same service logs to the
// runner's stderr or under TF_LOG, and to nothing in a program that passes
// none.
//
// Arguments after the message are key/value pairs, as with hclog:
//
//	log.Debug("network created", "name", name, "id", id)
//
// Never pass a value that can hold a secret (an API key, a token, a config
// map with secrets in it).
package logging

import "fmt"

// Logger receives structured log lines from the runtime services.
type Logger interface {
	Trace(msg string, args ...any)
	Debug(msg string, args ...any)
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}

// Nop is a Logger that drops every line.
type Nop struct{}

func (Nop) Trace(string, ...any) {}
func (Nop) Debug(string, ...any) {}
func (Nop) Info(string, ...any)  {}
func (Nop) Warn(string, ...any)  {}
func (Nop) Error(string, ...any) {}

// Or returns l, or Nop when l is nil, so a service may be built with no
// logger.
func Or(l Logger) Logger {
	if l == nil {
		return Nop{}
	}
	return l
}

// Fields turns hclog-style key/value pairs into a map, for adapters to
// loggers that take fields as a map (tflog). A key that is not a string is
// formatted; a lone trailing value is kept under "EXTRA_VALUE_AT_END", as
// hclog does.
func Fields(args []any) map[string]any {
	if len(args) == 0 {
		return nil
	}
	m := make(map[string]any, len(args)/2+1)
	for i := 0; i+1 < len(args); i += 2 {
		k, ok := args[i].(string)
		if !ok {
			k = fmt.Sprint(args[i])
		}
		m[k] = args[i+1]
	}
	if len(args)%2 == 1 {
		m["EXTRA_VALUE_AT_END"] = args[len(args)-1]
	}
	return m
}
