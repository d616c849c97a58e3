//go:build linux

package landlock

import (
	"fmt"

	ll "github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// presets are go-landlock's per-ABI configurations, index ABI-1: each
// handles every right its ABI knows, so nothing the kernel can restrict is
// left unhandled.
var presets = []ll.Config{ll.V1, ll.V2, ll.V3, ll.V4, ll.V5, ll.V6, ll.V7, ll.V8, ll.V9, ll.V10, ll.V11}

const (
	readDir  = llsys.AccessFSExecute | llsys.AccessFSReadFile | llsys.AccessFSReadDir
	readFile = llsys.AccessFSExecute | llsys.AccessFSReadFile
	// Device nodes (make_char, make_block) and ioctl on devices stay
	// denied even in read-write trees; refer lets mv work inside them.
	writeDir = llsys.AccessFSWriteFile | llsys.AccessFSRemoveDir | llsys.AccessFSRemoveFile |
		llsys.AccessFSMakeDir | llsys.AccessFSMakeReg | llsys.AccessFSMakeSock | llsys.AccessFSMakeFifo |
		llsys.AccessFSMakeSym | llsys.AccessFSTruncate | llsys.AccessFSRefer
	writeFile = llsys.AccessFSWriteFile | llsys.AccessFSTruncate
)

// Config is the go-landlock configuration r is enforced with on a kernel
// with Landlock ABI abi, and its rules. It fails (closed) when abi cannot
// enforce r.
func (r *Ruleset) Config(abi int) (ll.Config, []ll.Rule, error) {
	if err := r.Check(abi); err != nil {
		return ll.Config{}, nil, err
	}
	if abi > len(presets) {
		abi = len(presets)
	}
	p := presets[abi-1]
	// Scoped (ABI 6+): no signals to, and no abstract unix sockets of,
	// processes outside the sandbox, such as the runner.
	cfg := ll.Config{HandledAccessFS: p.HandledAccessFS, Scoped: p.Scoped}
	if r.DenyTCP {
		// No port rules: every TCP bind and connect is denied.
		cfg.HandledAccessNet = llsys.AccessNetBindTCP | llsys.AccessNetConnectTCP
	}
	rules := make([]ll.Rule, 0, len(r.Rules))
	for _, rule := range r.Rules {
		var a ll.AccessFSSet
		switch {
		case rule.File && rule.Access == ReadWrite:
			a = readFile | writeFile
		case rule.File:
			a = readFile
		case rule.Access == ReadWrite:
			a = readDir | writeDir
		default:
			a = readDir
		}
		rules = append(rules, ll.PathAccess(a&cfg.HandledAccessFS, rule.Path))
	}
	return cfg, rules, nil
}

// Restrict applies r to the calling process and everything it will exec or
// fork, in go-landlock's strict mode: every right the kernel's ABI knows is
// handled, and a kernel that cannot enforce r is an error, never a silent
// downgrade. It also sets no_new_privs. It cannot be undone: call it only
// in the short-lived child that then execs the agent loop.
func (r *Ruleset) Restrict(abi int) error {
	cfg, rules, err := r.Config(abi)
	if err != nil {
		return err
	}
	if err := cfg.Restrict(rules...); err != nil {
		return fmt.Errorf("landlock restrict: %w", err)
	}
	return nil
}
