package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/docker/docker/client"
	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// providerData is what Configure hands to every resource and data source.
type providerData struct {
	version      string
	docker       *lazyDocker
	stateDir     string
	runnerBinary string // as configured; resolve with RunnerBinary
	// kube is set when agents run on a Kubernetes cluster; registry is
	// where built images go for its nodes.
	kube     *kubeSettings
	registry *kube.RegistryConfig
	// topologies and agents are the backends Configure picked
	// (pickBackends).
	topologies topologyBackends
	agents     agentBackends
	// run is what this run has planned so far (pairs that clash).
	run *planRun
}

// lazyDocker connects on first use, so that validate and plan of
// configurations that need no daemon work without one.
type lazyDocker struct {
	opts engine.Options
	mu   sync.Mutex
	cli  *client.Client
}

func newLazyDocker(o engine.Options) *lazyDocker { return &lazyDocker{opts: o} }

// Client returns the connected client, connecting (and negotiating the API
// version) the first time.
func (l *lazyDocker) Client(ctx context.Context) (*client.Client, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cli != nil {
		return l.cli, nil
	}
	cli, err := engine.Connect(ctx, l.opts)
	if err != nil {
		return nil, err
	}
	l.cli = cli
	return cli, nil
}

// configureData extracts *providerData from a resource's or data source's
// Configure request; nil (no diagnostics) while the provider is not yet
// configured, as during validation.
func configureData(raw any, diags *diag.Diagnostics) *providerData {
	if raw == nil {
		return nil
	}
	d, ok := raw.(*providerData)
	if !ok {
		diags.AddError("Unexpected Provider Data", fmt.Sprintf("expected *providerData, got %T; this is a bug in the provider", raw))
		return nil
	}
	return d
}

// dockerClient returns the daemon client or adds one clear error naming the
// host that was tried.
func (d *providerData) dockerClient(ctx context.Context, diags *diag.Diagnostics) *client.Client {
	cli, err := d.docker.Client(ctx)
	if err != nil {
		diags.AddError("Docker Daemon Unreachable",
			fmt.Sprintf("The provider could not reach the Docker daemon at %s: %v\n\n"+
				"Start the daemon, or point the provider's docker_host (or DOCKER_HOST) at one that runs.",
				engine.HostOf(d.docker.opts), err))
		return nil
	}
	return cli
}

// runnerCandidates lists where the agent-runner binary is looked for, in
// order, for a daemon of the given GOARCH.
func (d *providerData) runnerCandidates(arch string) []string {
	var c []string
	if d.runnerBinary != "" {
		return []string{d.runnerBinary}
	}
	if env := os.Getenv("MEEPA_AGENT_RUNNER"); env != "" {
		return []string{env}
	}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		c = append(c, filepath.Join(dir, "agent-runner-linux-"+arch), filepath.Join(dir, "agent-runner"))
	}
	return c
}

// RunnerBinary resolves the agent-runner binary for a daemon of the given
// GOARCH (e.g. "amd64"): runner_binary, MEEPA_AGENT_RUNNER, beside the
// provider executable, then PATH.
func (d *providerData) RunnerBinary(arch string) (string, error) {
	cands := d.runnerCandidates(arch)
	for _, p := range cands {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	if d.runnerBinary == "" && os.Getenv("MEEPA_AGENT_RUNNER") == "" {
		if p, err := execLookPath("agent-runner"); err == nil {
			return p, nil
		}
		cands = append(cands, "agent-runner on PATH")
	}
	return "", fmt.Errorf("no agent-runner binary found (looked at: %v); build it with `make build` "+
		"or set the provider's runner_binary", cands)
}

// dockerIsLocal reports whether the daemon runs on this machine (a unix
// socket), so that this host's routes and iptables are the daemon's.
func dockerIsLocal(d *providerData) bool {
	return strings.HasPrefix(engine.HostOf(d.docker.opts), "unix://")
}
