package main

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/client"
)

// benchRunsc is (g): the runner round trip with prestart off and on, with
// the per-message containers under gVisor, interleaved round by round with
// the runc runners cold and warm so that the machine's load falls on both
// alike. It prints the medians and the ratios to runc,
//
//	bench-runsc: off=<runsc c / runc c> on=<runsc d / runc d>
//
// (the targets: off ≤ 3, on ≤ 1.5), or says why it was skipped.
func benchRunsc(ctx context.Context, cli *client.Client, rounds int, cold, warm *benchRunner,
	newRunner func(string, bool, string) (*benchRunner, error)) error {
	info, err := cli.Info(ctx)
	if err != nil {
		return err
	}
	if _, ok := info.Runtimes["runsc"]; !ok {
		fmt.Println("bench-runsc: skipped: dockerd has no runsc runtime (scripts/runsc.sh docker registers it)")
		return nil
	}
	gCold, err := newRunner(agentName("gcold"), false, "runsc")
	if err != nil {
		return err
	}
	gWarm, err := newRunner(agentName("gwarm"), true, "runsc")
	if err != nil {
		return err
	}
	var c, gc, d, gd []time.Duration
	for i := 0; i <= rounds; i++ {
		var t [4]time.Duration
		for j, r := range []struct {
			run  *benchRunner
			warm bool
		}{{cold, false}, {gCold, false}, {warm, true}, {gWarm, true}} {
			if r.warm {
				if err := r.run.waitReady(); err != nil {
					return err
				}
			}
			if t[j], err = timed(r.run.send); err != nil {
				return err
			}
			// A cold runner is idle once its container is gone; a warm
			// one once the next container is waiting.
			wait := r.run.waitIdle
			if r.warm {
				wait = r.run.waitReady
			}
			if err := wait(); err != nil {
				return err
			}
			time.Sleep(150 * time.Millisecond)
		}
		if i == 0 {
			continue // warm-up: gVisor's first sandbox loads its binary
		}
		c, gc, d, gd = append(c, t[0]), append(gc, t[1]), append(d, t[2]), append(gd, t[3])
	}
	fmt.Printf("(g) runner HTTP round trip under gVisor, prestart off median %7.1f ms (runc, same rounds: %.1f ms)\n", ms(median(gc)), ms(median(c)))
	fmt.Printf("(g) runner HTTP round trip under gVisor, prestart on  median %7.1f ms (runc, same rounds: %.1f ms)\n", ms(median(gd)), ms(median(d)))
	fmt.Printf("bench-runsc: off=%.2f on=%.2f\n", ratio(gc, c), ratio(gd, d))
	return nil
}
