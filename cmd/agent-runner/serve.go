package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

func init() {
	register("serve", "run one agent's message service (HTTP on a unix socket or TCP)", runServe)
}

// runServe: agent-runner serve --config PATH [--unrestricted] [--config-secret]
//
// SIGTERM/SIGINT finish the message in flight and stop; SIGHUP re-reads the
// config (discarding a prestarted container made for the old one).
// MEEPA_LOG_LEVEL (trace, debug, info, warn, error) and MEEPA_LOG_FORMAT=json
// shape the logs.
func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "path of the runner config file (JSON, mode 0600)")
	unrestricted := fs.Bool("unrestricted", false, "host mode without file access restrictions (file_access.unrestricted)")
	inSecret := fs.Bool("config-secret", false, "the config is a Kubernetes Secret volume, readable by the pod's fsGroup (the runner's own group)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cfgPath == "" {
		fmt.Fprintln(os.Stderr, "agent-runner serve: --config is required")
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{
		Name:       "agent-runner",
		Level:      hclog.LevelFromString(envOr("MEEPA_LOG_LEVEL", "info")),
		JSONFormat: strings.EqualFold(os.Getenv("MEEPA_LOG_FORMAT"), "json"),
		Output:     os.Stderr,
	})
	load := func() (*agentspec.Config, error) {
		loadFile := agentspec.LoadConfig
		if *inSecret {
			loadFile = agentspec.LoadSecretConfig
		}
		cfg, err := loadFile(*cfgPath)
		if err != nil {
			return nil, err
		}
		if *unrestricted {
			// The flag turns every rule off: a deny list has nothing
			// left to act on (and would be refused with unrestricted).
			cfg.FileAccess.Unrestricted = true
			cfg.FileAccess.Deny = nil
		}
		return cfg, nil
	}
	cfg, err := load()
	if err != nil {
		log.Error("config", "error", err)
		return 1
	}
	// The runner holds the API key (it relays the agent's LLM calls): no
	// process of its uid may read its memory through /proc/<pid>/mem or
	// ptrace, and it leaves no core dump. Landlock already keeps a
	// restricted host-mode agent out; this covers an unrestricted one.
	if err := landlock.SetNonDumpable(); err != nil {
		log.Warn("could not make the runner non-dumpable", "error", err)
	}
	if *unrestricted {
		// The host backend repeats this for every config it is made with
		// (file_access.unrestricted too); this names the flag.
		log.Warn("started with --unrestricted: without container mode, agents run with NO Landlock file access or network rules")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := runner.New(ctx, cfg, runner.Options{Logger: log})
	cancel()
	if err != nil {
		log.Error("start", "error", err)
		return 1
	}
	ln, err := runner.Listen(cfg.Listen)
	if err != nil {
		log.Error("start", "error", err)
		_ = srv.Shutdown(context.Background())
		return 1
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	for {
		select {
		case err := <-served:
			if err != nil {
				log.Error("serve", "error", err)
				return 1
			}
			return 0
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				next, err := load()
				if err == nil {
					rctx, rcancel := context.WithTimeout(context.Background(), cfg.Container.Timeout()+time.Minute)
					err = srv.Reload(rctx, next)
					rcancel()
				}
				if err != nil {
					log.Error("reload", "error", err)
				} else {
					cfg = next
				}
				continue
			}
			log.Info("shutting down", "signal", sig.String())
			// Bound: the message in flight may take its whole timeout.
			sctx, scancel := context.WithTimeout(context.Background(), cfg.Container.Timeout()+15*time.Second)
			err := srv.Shutdown(sctx)
			scancel()
			if serr := <-served; serr != nil {
				log.Error("serve", "error", serr)
			}
			if err != nil {
				log.Error("shutdown", "error", err)
				return 1
			}
			return 0
		}
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
