package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/probe"
)

func init() {
	register("probe", "run connectivity checks (tcp=, connect=, dns=) and print one JSON line each", runProbe)
}

// runProbe is what ThreeGate verification runs inside its probe containers.
func runProbe(args []string) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 2*time.Second, "time allowed per check")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	enc := json.NewEncoder(os.Stdout)
	for _, a := range fs.Args() {
		c, err := probe.Parse(a)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		_ = enc.Encode(probe.Run(context.Background(), c, *timeout))
	}
	return 0
}
