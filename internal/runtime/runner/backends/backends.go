// Package backends makes the sandbox backend a runner config asks for
// (New): the Docker per-message container, the Landlock host child, or a
// Pod per message, each connected to the runner's LLM relay in its own way
// (sandbox.RelayLink). It is the one place that knows which backend a
// config gets; the runner's server takes the ready backend and asks it
// nothing about its kind.
package backends

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/docker/docker/client"
	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// Relay is the runner's LLM relay as the backends connect their sandboxes
// to it (relay.Relay).
type Relay interface {
	// ListenIn opens the relay's unix socket in dir, or keeps the one it
	// has, and returns the directory in use (Docker mounts it).
	ListenIn(dir string) (string, error)
	// Pair is one message's connection for a host-mode child to inherit.
	Pair() (child *os.File, stop func(), err error)
	// ServeConn serves the relay on a pod's attach stream until stop.
	ServeConn(conn net.Conn) (stop func())
}

// Modes reported by /healthz.
const (
	ModeContainer = "container"
	ModeHost      = "host"
)

// New is the one place that picks the sandbox for a config: the
// Docker per-message container with container mode, a Pod per message with
// a kubernetes section, else the host backend. It connects the backend to
// relay in that backend's way (sandbox.RelayLink) when the config's
// messages use the relay (agentspec.NeedsRelay), so the server never asks which
// backend it has.
func New(ctx context.Context, cfg *agentspec.Config, relay Relay, log hclog.Logger) (sandbox.Backend, string, error) {
	if cfg.Kubernetes != nil {
		return newKube(ctx, cfg, relay, log)
	}
	if !cfg.Container.Enabled {
		o := HostOptions(cfg, log)
		if agentspec.NeedsRelay(cfg) {
			o.RelayPair = relay.Pair
		}
		h, err := sandbox.NewHost(o)
		return h, ModeHost, err
	}
	o := DockerOptions(cfg, log)
	if mountsRelayDir(cfg) {
		// The socket exists before any container that mounts its
		// directory, and keeps it for the runner's life. A bridge
		// agent's bound secrets need the directory too: the runner's
		// broker puts its socket there.
		dir, err := relay.ListenIn(RelayDir(cfg))
		if err != nil {
			return nil, ModeContainer, err
		}
		o.Spec.RelayDir = dir
	}
	cli, err := engine.Connect(ctx, engine.Options{Host: cfg.DockerHost})
	if err != nil {
		return nil, ModeContainer, err
	}
	nets := o.Spec.Networks
	if len(nets) == 0 && o.Spec.Network == "bridge" {
		nets = []string{sandbox.ManagedBridge}
	}
	if len(nets) > 0 {
		// ThreeGate members, and containers on the managed bridge, start
		// only while their guard vouches for the host firewall (see
		// package guard).
		o.Enforcement = func(ctx context.Context) error { return guard.Enforced(ctx, cli, nets) }
	}
	d, err := sandbox.NewDocker(ctx, cli, o)
	if err != nil {
		return nil, ModeContainer, errors.Join(err, cli.Close())
	}
	return &dockerBackend{Docker: d, cli: cli}, ModeContainer, nil
}

// DockerOptions maps a runner config onto the Docker backend's options.
func DockerOptions(cfg *agentspec.Config, log hclog.Logger) sandbox.DockerOptions {
	cm := cfg.Container
	o := sandbox.DockerOptions{
		Spec: sandbox.Spec{
			AgentID:     cfg.AgentID,
			Workspace:   cfg.Workspace,
			Image:       cm.Image,
			MemoryLimit: cm.MemoryLimit,
			PidsLimit:   cm.PidsLimit,
			Network:     cm.Network,
			Networks:    cm.Networks,
			DNS:         cm.DNS,
			User:        cm.User,
			Runtime:     cm.Runtime,
			Env:         cfg.Env,
		},
		Prestart: cm.Prestart,
		// agent-run marks a reply that needs no wait for its exit.
		Final:  agentspec.FinalReply,
		Logger: log,
	}
	if mountsRelayDir(cfg) {
		o.Spec.RelayDir = RelayDir(cfg)
	}
	if cfg.Role == agentspec.RoleToolExec {
		// TOOL-EXEC's execution sandbox has no network at all: no route to
		// llmnet, the proxy or the LLM gateway. Its LLM calls go through
		// the relay socket, which needs none.
		o.Spec.Network, o.Spec.Networks, o.Spec.DNS = "none", nil, nil
	}
	// The workspace is chowned to the container user when this process can
	// see it at the same path and may chown; otherwise whoever made it (the
	// provider) must have made it writable for that user.
	if st, err := os.Stat(cfg.Workspace); err == nil && st.IsDir() && os.Geteuid() == 0 {
		o.ChownWorkspace = true
	} else if log != nil {
		log.Warn("workspace not chowned for the container user; it must already be writable by it",
			"workspace", cfg.Workspace, "user", cm.User.Or(agentspec.AgentUser(cfg.AgentID)).String())
	}
	return o
}

// mountsRelayDir says whether per-message containers mount the relay's
// directory: for the LLM relay, or for the runner's egress broker.
func mountsRelayDir(cfg *agentspec.Config) bool {
	return agentspec.NeedsRelay(cfg) || agentspec.BrokersInContainer(cfg)
}

// RelayDir is the directory of the runner's LLM relay socket, which every
// per-message container mounts: Config.RelayDir, else run/relay beside the
// config file (in the provider's layout <state_dir>/runners/<id>/run, the
// directory the runner's own container may write, at the same path as on
// the Docker host), else a directory of the agent's under the temp dir.
func RelayDir(cfg *agentspec.Config) string {
	switch {
	case cfg.RelayDir != "":
		return cfg.RelayDir
	case cfg.Path != "":
		return filepath.Join(filepath.Dir(cfg.Path), "run", "relay")
	}
	return filepath.Join(os.TempDir(), "meepa-relay-"+safeName(cfg.AgentID))
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '-'
	}, s)
}

// HostOptions maps a runner config onto the host (Landlock) backend's
// options: the same memory, pids and timeout settings as container mode.
func HostOptions(cfg *agentspec.Config, log hclog.Logger) sandbox.HostOptions {
	fa := cfg.FileAccess
	if cfg.Role == agentspec.RoleToolExec {
		// No TCP for the child (Landlock ABI 4, else the message fails
		// closed); its LLM calls use the inherited relay socket.
		fa.AllowNetwork = false
	}
	return sandbox.HostOptions{
		AgentID:     cfg.AgentID,
		Workspace:   cfg.Workspace,
		FileAccess:  fa,
		MemoryLimit: cfg.Container.MemoryLimit,
		PidsLimit:   cfg.Container.PidsLimit,
		Env:         cfg.Env,
		Protect:     protectedPaths(cfg.Path, cfg.Journal),
		StateDir:    stateDir(cfg.Path),
		Logger:      log,
	}
}

// protectedPaths are the runner files a host-mode agent must never read,
// whatever file_access allows: its config (the token, the API key, the
// secrets), its journal (message text and replies), and in the provider's
// layout <state_dir>/runners/<id>/ every agent's runner files, since
// host-mode agents run as the same user.
func protectedPaths(configPath, journal string) []string {
	var p []string
	if journal != "" {
		p = append(p, journal)
	}
	if configPath == "" {
		return p
	}
	p = append(p, configPath)
	if runners := filepath.Dir(filepath.Dir(configPath)); filepath.Base(runners) == "runners" {
		p = append(p, runners)
	}
	return p
}

// stateDir is <state_dir> when the config lies in the provider's layout
// (<state_dir>/runners/<id>/config.json), else "".
func stateDir(configPath string) string {
	if configPath == "" {
		return ""
	}
	if runners := filepath.Dir(filepath.Dir(configPath)); filepath.Base(runners) == "runners" {
		return filepath.Dir(runners)
	}
	return ""
}

// dockerBackend owns its Docker client.
type dockerBackend struct {
	*sandbox.Docker
	cli *client.Client
}

func (b *dockerBackend) Close(ctx context.Context) error {
	err := b.Docker.Close(ctx)
	return errors.Join(err, b.cli.Close())
}
