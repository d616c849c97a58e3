package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

// landlock-exec is internal: the host backend (serve without container
// mode) starts it as a fresh child for each message, with the compiled
// Landlock ruleset on fd 3. It restricts ITSELF — never the long-lived
// runner — and then execs `agent-runner agent-run`, which reads the
// request on stdin only after the rules are in force.
func init() {
	register("landlock-exec", "internal: restrict self (Landlock ruleset on fd 3), then exec agent-run", runLandlockExec)
}

func runLandlockExec(args []string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "%s%v\n", landlock.ChildErrorPrefix, err)
		return landlock.ChildErrorExit
	}
	if len(args) != 0 {
		return fail(fmt.Errorf("landlock-exec takes no arguments"))
	}
	// Its config names the paths it hides and the uid it becomes.
	if err := landlock.SetNonDumpable(); err != nil {
		return fail(err)
	}
	f := os.NewFile(3, "landlock-config")
	if f == nil {
		return fail(fmt.Errorf("no config on fd 3"))
	}
	cfg, err := landlock.ReadChildConfig(f)
	_ = f.Close() // read-only: nothing to lose
	if err != nil {
		return fail(err)
	}
	// The agent loop is this same binary; resolve it before Landlock makes
	// /proc/self/exe's target the only way to name it.
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return fail(fmt.Errorf("locate agent-runner: %w", err))
	}
	return fail(landlock.ExecRestricted(cfg, []string{exe, "agent-run"}))
}

func init() {
	register("landlock-abi", "print the Landlock ABI this process sees (0: none, e.g. blocked by seccomp)", func([]string) int {
		fmt.Println(landlock.DetectABI())
		return 0
	})
}
