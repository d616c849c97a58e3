package guard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
)

// Labels of the guard container, beside engine.Labels("guard", ...).
const (
	Component     = "guard"
	LabelTopology = engine.LabelPrefix + "threegate" // the topology name, as on its networks
	LabelConfig   = engine.LabelPrefix + "guard.config"
	// LabelEnforce is "on", or "off" for a topology whose firewall the
	// user disabled: then the guard only marks that choice, and runners
	// start members without waiting for rules.
	LabelEnforce = engine.LabelPrefix + "guard.enforce"
	// LabelBridge names, on a managed bridge network (package bridge),
	// the network whose guard vouches for its rules.
	LabelBridge = engine.LabelPrefix + "bridge"
)

// Health check timing. The daemon runs the check every HealthInterval;
// HealthStale is how old the last check may be when a runner asks.
const (
	HealthInterval = time.Second
	HealthStale    = 10 * time.Second
	runnerPath     = "/usr/local/bin/agent-runner"
	guardMemory    = 64 << 20
	guardPids      = 64
)

// Name is the guard container of a topology.
func Name(topology string) string { return topology + "-guard" }

// Want is the guard a topology should have. Params nil means the firewall
// is disabled.
type Want struct {
	Topology string
	Image    string // an isolation image (it has /usr/local/bin/agent-runner)
	Params   *firewall.Params
	// Bridge, instead of Params, makes the guard of a managed bridge
	// network (package bridge); Topology is then the network's name.
	Bridge *firewall.BridgeParams
}

// enforcing reports whether the guard holds a rule set.
func (w Want) enforcing() bool { return w.Params != nil || w.Bridge != nil }

// Spec is the guard container's configuration and its config hash.
func Spec(w Want) (*container.Config, *container.HostConfig, string, error) {
	cmd := []string{"guard", "--off", "--topology", w.Topology}
	enforce := "off"
	if w.Params != nil {
		p, err := EncodeParams(*w.Params)
		if err != nil {
			return nil, nil, "", err
		}
		cmd = []string{"guard", "--root", HostRoot, "--params", p}
		enforce = "on"
	}
	if w.Bridge != nil {
		p, err := EncodeBridge(*w.Bridge)
		if err != nil {
			return nil, nil, "", err
		}
		cmd = []string{"guard", "--root", HostRoot, "--bridge", p}
		enforce = "on"
	}
	var layout hostLayout
	if w.enforcing() {
		var err error
		if layout, err = readHostLayout("/"); err != nil {
			return nil, nil, "", err
		}
	}
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "v1\n%s\n%s\n%s\n%s\n", w.Image, strings.Join(cmd, "\x00"),
		strings.Join(layout.dirs, ","), strings.Join(layout.links, ","))
	hash := hex.EncodeToString(h.Sum(nil))[:16]
	cfg := &container.Config{
		Image:      w.Image,
		Entrypoint: []string{runnerPath},
		Cmd:        slices.Clone(cmd),
		User:       "0:0",
		Labels: engine.Labels(Component, map[string]string{
			LabelTopology: w.Topology, LabelConfig: hash, LabelEnforce: enforce,
		}),
	}
	pids := int64(guardPids)
	hc := &container.HostConfig{
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
		Resources:      container.Resources{Memory: guardMemory, MemorySwap: guardMemory, PidsLimit: &pids},
		NetworkMode:    "none",
		LogConfig:      container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "2"}},
	}
	if w.enforcing() {
		cfg.Healthcheck = &container.HealthConfig{
			Test:     []string{"CMD", runnerPath, "guard", "health"},
			Interval: HealthInterval, Timeout: 5 * time.Second, Retries: 1,
		}
		// The host's network namespace is the one whose iptables Docker
		// programs; NET_ADMIN and NET_RAW change it (nf_tables and legacy),
		// SYS_CHROOT runs the host's own iptables from HostRoot.
		hc.NetworkMode = "host"
		hc.CapAdd = []string{"NET_ADMIN", "NET_RAW", "SYS_CHROOT"}
		hc.Tmpfs = map[string]string{
			HeartbeatDir: "rw,noexec,nosuid,nodev,size=64k",
			// The chroot's skeleton: the host's top-level links are made
			// here at start, its directories are bound below it.
			HostRoot: "rw,nosuid,nodev,size=64k,mode=0755",
		}
		for _, e := range layout.dirs {
			hc.Mounts = append(hc.Mounts, mount.Mount{
				Type: mount.TypeBind, Source: "/" + e, Target: HostRoot + "/" + e, ReadOnly: true,
				// Only that filesystem itself, no mounts below it.
				BindOptions: &mount.BindOptions{NonRecursive: true},
			})
		}
		for _, l := range layout.links {
			cfg.Cmd = append(cfg.Cmd, "--link", l)
		}
	}
	return cfg, hc, hash, nil
}

// Ensure makes the guard of w run with w's configuration (replacing one
// with another) and, when it enforces, waits up to wait for it to report
// healthy, so that members started right after apply are not refused.
func Ensure(ctx context.Context, cli client.APIClient, w Want, wait time.Duration) error {
	cfg, hc, hash, err := Spec(w)
	if err != nil {
		return err
	}
	name := Name(w.Topology)
	c, err := cli.ContainerInspect(ctx, name)
	switch {
	case errdefs.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("container inspect %s: %w", name, err)
	case c.Config != nil && c.Config.Labels[LabelConfig] == hash:
		if c.State == nil || !c.State.Running {
			if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
				return fmt.Errorf("container start %s: %w", name, err)
			}
		}
		return waitHealthy(ctx, cli, name, w.enforcing(), wait)
	default:
		if err := Remove(ctx, cli, w.Topology); err != nil {
			return err
		}
	}
	if _, err := cli.ImageInspect(ctx, w.Image); err != nil {
		return fmt.Errorf("guard image %s (the proxy's image): %w", w.Image, err)
	}
	created, err := cli.ContainerCreate(ctx, cfg, hc, &network.NetworkingConfig{}, nil, name)
	if err != nil {
		return fmt.Errorf("container create %s: %w", name, err)
	}
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return errors.Join(fmt.Errorf("container start %s: %w", name, err), Remove(ctx, cli, w.Topology))
	}
	return waitHealthy(ctx, cli, name, w.enforcing(), wait)
}

func waitHealthy(ctx context.Context, cli client.APIClient, name string, enforcing bool, wait time.Duration) error {
	if !enforcing {
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		c, err := cli.ContainerInspect(ctx, name)
		if err != nil {
			return fmt.Errorf("container inspect %s: %w", name, err)
		}
		problem := healthProblem(c, time.Now())
		if problem == "" {
			return nil
		}
		if c.State != nil && !c.State.Running && c.State.Status == "exited" || time.Now().After(deadline) {
			return fmt.Errorf("guard %s is not healthy after %s: %s", name, wait, problem)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("guard %s: %w", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Remove force-removes the guard of a topology; gone is done. Remove it
// before the rules: a running guard would put them back.
func Remove(ctx context.Context, cli client.APIClient, topology string) error {
	err := cli.ContainerRemove(ctx, Name(topology), container.RemoveOptions{Force: true})
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("container remove %s: %w", Name(topology), err)
	}
	return nil
}

// Drift lists how the live guard differs from w, in words (empty: in
// sync), and whether a guard container exists at all.
func Drift(ctx context.Context, cli client.APIClient, w Want) ([]string, bool, error) {
	_, _, hash, err := Spec(w)
	if err != nil {
		return nil, false, err
	}
	name := Name(w.Topology)
	c, err := cli.ContainerInspect(ctx, name)
	if errdefs.IsNotFound(err) {
		return []string{fmt.Sprintf("firewall guard container %s is missing, so nothing restores the rules after a reboot or flush", name)}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("container inspect %s: %w", name, err)
	}
	if c.Config == nil || c.Config.Labels[LabelConfig] != hash {
		return []string{fmt.Sprintf("firewall guard container %s holds another rule set or image", name)}, true, nil
	}
	if !w.enforcing() {
		return nil, true, nil
	}
	if p := healthProblem(c, time.Now()); p != "" {
		return []string{fmt.Sprintf("firewall guard container %s: %s", name, p)}, true, nil
	}
	return nil, true, nil
}

// healthProblem says why a guard container does not vouch for its rules
// now; empty means it does: it runs, the daemon's last health check passed
// and is recent.
func healthProblem(c container.InspectResponse, now time.Time) string {
	if c.State == nil || !c.State.Running {
		status := "absent"
		if c.State != nil {
			status = c.State.Status
		}
		return "not running (" + status + ")"
	}
	h := c.State.Health
	if h == nil {
		return "has no health check"
	}
	if h.Status != container.Healthy {
		msg := ""
		if n := len(h.Log); n > 0 {
			msg = ": " + strings.TrimSpace(h.Log[n-1].Output)
		}
		return "health " + h.Status + msg
	}
	n := len(h.Log)
	if n == 0 || now.Sub(h.Log[n-1].End) > HealthStale {
		return fmt.Sprintf("its last health check is older than %s", HealthStale)
	}
	// The daemon keeps a container's health across a restart (its own or
	// the container's) and sets it back to "starting" only a moment after
	// the container runs again; in between, inspect shows the old
	// "healthy". Only a check run since this start vouches.
	started, err := time.Parse(time.RFC3339Nano, c.State.StartedAt)
	if err != nil {
		return fmt.Sprintf("has no start time (%q)", c.State.StartedAt)
	}
	if !h.Log[n-1].Start.After(started) {
		return "has not been checked since it started"
	}
	return ""
}

// hostEntries are the top-level entries of the host's root that running
// its iptables needs: the binaries, the loader and libraries (directories
// or, on merged-/usr systems, links into /usr) and /etc (alternatives, the
// loader cache, protocols). Bound one by one because the daemon refuses a
// bind of "/" (it holds the daemon's root) on a host whose / is private.
var hostEntries = []string{"usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

type hostLayout struct {
	dirs  []string // bound read-only at HostRoot/<name>
	links []string // "name=target", recreated in HostRoot
}

func readHostLayout(root string) (hostLayout, error) {
	var l hostLayout
	for _, e := range hostEntries {
		p := filepath.Join(root, e)
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return l, fmt.Errorf("guard: read host layout: %w", err)
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return l, fmt.Errorf("guard: read host layout: %w", err)
			}
			l.links = append(l.links, e+"="+target)
		case fi.IsDir():
			l.dirs = append(l.dirs, e)
		}
	}
	if !slices.Contains(l.dirs, "usr") || !slices.Contains(l.dirs, "etc") {
		return l, errors.New("guard: the host has no /usr or /etc directory to run its iptables from")
	}
	return l, nil
}
