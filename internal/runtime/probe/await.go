package probe

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// AwaitStep is the pause between rounds of Await; DefaultAwaitLimit how
// long agent-run waits by default.
const (
	AwaitStep         = 100 * time.Millisecond
	DefaultAwaitLimit = 20 * time.Second
)

// Await returns once every check in blocked finds no way through (any
// outcome but Open) and every check in open gets through (Open), trying
// again until limit. A cluster's network policies take a moment to cover a
// new pod, and until then the pod may reach what its policies forbid; a
// process that must not run unconfined waits here first, and gives up
// (an error: fail closed) when the policies never arrive.
func Await(ctx context.Context, blocked, open []Check, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	per := 300 * time.Millisecond
	for {
		var wrong []string
		for _, c := range blocked {
			if r := Run(ctx, c, per); r.Observed == Open {
				wrong = append(wrong, c.String()+" still open")
			}
		}
		for _, c := range open {
			if r := Run(ctx, c, per); r.Observed != Open {
				wrong = append(wrong, c.String()+" "+r.Observed)
			}
		}
		if len(wrong) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("network policy not in force after %s: %s", limit, strings.Join(wrong, ", "))
		case <-time.After(AwaitStep):
		}
	}
}
