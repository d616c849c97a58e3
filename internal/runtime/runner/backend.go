package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/client"
	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/guard"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// Modes reported by /healthz.
const (
	ModeContainer = "container"
	ModeHost      = "host"
)

// NewBackend is the one place that picks the sandbox for a config: the
// Docker per-message container with container mode, a Pod per message with
// a kubernetes section, else the host backend.
func NewBackend(ctx context.Context, cfg *agentspec.Config, log hclog.Logger) (sandbox.Backend, string, error) {
	if cfg.Kubernetes != nil {
		return newKubeBackend(ctx, cfg, log)
	}
	if !cfg.Container.Enabled {
		h, err := sandbox.NewHost(HostOptions(cfg, log))
		return h, ModeHost, err
	}
	cli, err := engine.Connect(ctx, engine.Options{Host: cfg.DockerHost})
	if err != nil {
		return nil, ModeContainer, err
	}
	o := DockerOptions(cfg, log)
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
	if needsRelay(cfg) {
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

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks what the runner needs before it listens, beyond the
// owner's settings (agentspec.ValidateSettings, which it runs too).
func Validate(c *agentspec.Config) error {
	var errs []error
	if c.AgentID == "" {
		errs = append(errs, errors.New("agent_id is empty"))
	}
	if c.Token == "" {
		errs = append(errs, errors.New("token is empty"))
	}
	if c.Listen == "" {
		errs = append(errs, errors.New("listen is empty"))
	}
	if c.Workspace == "" {
		errs = append(errs, errors.New("workspace is empty"))
	}
	if _, err := agent.RoleTools(c.Role); err != nil {
		errs = append(errs, err)
	}
	if c.Role == agentspec.RoleToolExec && !c.Container.Enabled && c.FileAccess.Unrestricted {
		errs = append(errs, errors.New("role tool_exec runs its tools with no network, which an unrestricted host-mode agent cannot enforce; turn container mode on or file_access.unrestricted off"))
	}
	if len(c.Ask) > 0 && c.Role != agentspec.RoleCore {
		// Depth one: only CORE asks, and only FETCH and TOOL-EXEC answer.
		errs = append(errs, fmt.Errorf("ask: only a core agent may ask other agents, and this one's role is %q", c.Role))
	}
	for i, a := range c.Ask {
		switch {
		case a.AgentID == "" || a.AgentID == c.AgentID:
			errs = append(errs, fmt.Errorf("ask[%d]: agent_id %q: want another agent's id", i, a.AgentID))
		case a.Role != agentspec.RoleFetch && a.Role != agentspec.RoleToolExec:
			errs = append(errs, fmt.Errorf("ask[%d]: agent %s has role %q; a core agent asks only fetch and tool_exec agents", i, a.AgentID, a.Role))
		case c.Kubernetes == nil && (a.Token == "" || a.Port != 0 || !validAskListen(a.Listen)):
			errs = append(errs, fmt.Errorf("ask[%d]: agent %s: want its runner's listen (unix:///path or 127.0.0.1:PORT) and token", i, a.AgentID))
		case c.Kubernetes != nil && (a.Token == "" || a.Listen != "" || a.Port < 1 || a.Port > 65535):
			errs = append(errs, fmt.Errorf("ask[%d]: agent %s: on kubernetes want its runner's port and token, and no listen (its pod is found by its labels)", i, a.AgentID))
		}
	}
	if c.Container.Enabled && c.Container.Image == "" {
		errs = append(errs, errors.New("container_mode.image is empty"))
	}
	if within(c.Path, c.Workspace) {
		errs = append(errs, fmt.Errorf("the config file %s lies inside the workspace, where the agent can read and change it; keep it outside", c.Path))
	}
	switch {
	case c.Journal != "" && (!filepath.IsAbs(c.Journal) || filepath.Clean(c.Journal) != c.Journal):
		errs = append(errs, fmt.Errorf("journal_dir %q: want an absolute, clean path", c.Journal))
	case within(c.Journal, c.Workspace) || within(c.Workspace, c.Journal):
		errs = append(errs, fmt.Errorf("journal_dir %s and the workspace overlap; the journal holds message text the agent must not read or change", c.Journal))
	}
	// Env is set on the sandbox, where `docker inspect` and /proc show it;
	// a secret there would outlive the message. Secrets travel on stdin.
	if red := redactor(c); len(c.Env) > 0 {
		for _, k := range slices.Sorted(maps.Keys(c.Env)) {
			v := c.Env[k]
			switch {
			case !envNameRe.MatchString(k) || strings.ContainsRune(v, 0):
				// "HOME=/x y" would set HOME in host mode, where the
				// environment is a list exec reads first-match.
				errs = append(errs, fmt.Errorf("env %q: want a variable name and a value without NUL", k))
			case red.String(v) != v:
				errs = append(errs, fmt.Errorf("env %s holds the API key or a secret value; pass secrets in secrets (inject_secrets_env), never in env", k))
			}
		}
	}
	errs = append(errs, validateKubernetes(c))
	// What the owner chose is checked as the provider's plan checks it.
	errs = append(errs, agentspec.ValidateSettings(c))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runner config: %w", err)
	}
	return nil
}

// within says path is dir or lies inside it (both set).
func within(path, dir string) bool {
	if path == "" || dir == "" {
		return false
	}
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// validAskListen: an ask target's runner listens on a unix socket (an
// absolute path) or on 127.0.0.1 with a numeric port, nothing else: the
// ask carries that runner's token.
func validAskListen(listen string) bool {
	if p, ok := strings.CutPrefix(listen, "unix://"); ok {
		return strings.HasPrefix(p, "/") && p == filepath.Clean(p)
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil || host != "127.0.0.1" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 65536 && strconv.Itoa(n) == port
}
