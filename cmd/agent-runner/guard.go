package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
)

func init() {
	register("guard", "keep a ThreeGate topology's host firewall in force (guard health: the container's health check)", runGuard)
}

// runGuard is the process of a topology's guard container:
//
//	guard --params JSON [--root /host] [--interval 1s]   check and restore the rules
//	guard --bridge JSON [--root /host] [--interval 1s]   the same for a managed bridge network
//	guard --off --topology NAME                          mark an unenforced topology
//	guard health                                         exit 0 while the heartbeat is fresh
func runGuard(args []string) int {
	if len(args) > 0 && args[0] == "health" {
		if err := guard.Healthy(guard.HeartbeatFile, guard.MaxHeartbeatAge, time.Now()); err != nil {
			fmt.Println("not enforced:", err)
			return 1
		}
		fmt.Println("enforced")
		return 0
	}
	fs := flag.NewFlagSet("guard", flag.ContinueOnError)
	params := fs.String("params", "", "the topology's firewall parameters (JSON)")
	bridgeParams := fs.String("bridge", "", "a managed bridge network's firewall parameters (JSON), instead of --params")
	root := fs.String("root", "", "run the host's iptables chrooted here (the host root, mounted read-only)")
	interval := fs.Duration("interval", guard.DefaultInterval, "how often the rules are checked")
	off := fs.Bool("off", false, "the topology's firewall is disabled: only mark that, enforce nothing")
	topo := fs.String("topology", "", "topology name (with --off)")
	var links stringList
	fs.Var(&links, "link", "name=target: a top-level link of the host's root to recreate under --root (repeatable)")
	logLevel := fs.String("log-level", "info", "trace, debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "guard", Level: hclog.LevelFromString(*logLevel), Output: os.Stderr, JSONFormat: true})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *off {
		log.Warn("host firewall disabled for this topology; members start without it", "topology", *topo)
		<-ctx.Done()
		return 0
	}
	set, err := guardSet(*params, *bridgeParams)
	if err != nil {
		log.Error("invalid configuration", "error", err)
		return 2
	}
	if err := guard.Run(ctx, set, guard.Options{Interval: *interval, Root: *root, Links: links, Logger: log}); err != nil {
		log.Error("guard stopped", "error", err)
		return 1
	}
	return 0
}

// guardSet is the rule set the guard holds: a managed bridge's with
// --bridge, else the topology's.
func guardSet(params, bridge string) (firewall.Set, error) {
	if bridge != "" {
		p, err := guard.DecodeBridge(bridge)
		return firewall.BuildBridge(p), err
	}
	p, err := guard.DecodeParams(params)
	return firewall.Build(p), err
}
