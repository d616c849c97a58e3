// Command agent-runner is the one binary inside every isolation image. Its
// subcommands are the per-agent service (serve), the agent loop that runs in a
// per-message sandbox (agent-run), the ThreeGate egress proxy (proxy) and
// version. Each subcommand lives in its own file and registers itself here.
package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/bogpad/terraform-provider-meepa/internal/version"
)

type command struct {
	summary string
	run     func(args []string) int
}

var commands = map[string]command{
	"version": {summary: "print version, commit and platform", run: func([]string) int {
		fmt.Println(version.String())
		return 0
	}},
}

// register adds a subcommand; called from init in the subcommand's file.
func register(name, summary string, run func(args []string) int) {
	commands[name] = command{summary: summary, run: run}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: agent-runner <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "agent-runner: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	os.Exit(cmd.run(os.Args[2:]))
}
