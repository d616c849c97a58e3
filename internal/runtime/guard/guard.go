// Package guard keeps a ThreeGate topology's host firewall in force without
// anyone running terraform, and tells runners whether it is in force.
//
// Why a container: on a Docker host the daemon's restart policy is the one
// thing that is sure to start processes at boot (there may be no systemd, and
// an init unit the provider installed would be a second source of truth that
// outlives `terraform destroy`). So each topology gets a guard container,
// `<name>-guard`, restart policy unless-stopped, in the host's network
// namespace with NET_ADMIN and NET_RAW only (plus SYS_CHROOT, see below). It
// holds the topology's rule set (its firewall.Params on the command line),
// reads the live rules every Interval and, when a chain, a rule or a jump is
// missing or altered, re-applies the whole set in one iptables-restore
// transaction. After every check that finds the set in place it refreshes a
// heartbeat file; the container's Docker health check reports healthy only
// while that file is fresh.
//
// Why the health check is the published state: the runner of a ThreeGate
// member already talks to the Docker daemon (it starts the member
// containers), so "guard container running, healthy, and probed recently"
// is something it can ask at the moment it starts a container, with no
// extra mount and no shared file. The daemon resets a container's health to
// "starting" whenever it (re)starts, so a heartbeat from before a reboot or
// a daemon restart can never pass for a current one: runners refuse until
// the new guard has itself seen the rules in place.
//
// Why iptables from the host: the guard must speak to the kernel exactly as
// the host's iptables does (same backend, nf_tables or legacy, same
// extension modules, same alternatives choice), or its rules would land
// where DOCKER-USER's are not. The isolation image may have no iptables at
// all, and copying binaries into an image freezes a version the host's
// package manager then no longer updates. So the host's root filesystem is
// bind-mounted read-only at /host, directory by directory (/usr, /etc and
// the library directories, non-recursively: no /proc, /run or other
// mounts below them), and the guard runs the host's own iptables-save and
// iptables-restore chrooted into it. Nothing else of the host is reachable,
// and nothing but our own binary runs in the guard.
package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/logging"
)

// Defaults of the guard loop and of the health check.
const (
	// DefaultInterval is how often the live rules are checked: a flushed
	// chain is back within about this long.
	DefaultInterval = time.Second
	// HeartbeatDir is a tmpfs in the guard container (empty at every start).
	HeartbeatDir = "/run/meepa-guard"
	// HeartbeatFile is refreshed after every check that found the set in place.
	HeartbeatFile = HeartbeatDir + "/enforced"
	// MaxHeartbeatAge is how old the heartbeat may be for the health check
	// to pass: a few intervals, so that a slow iptables-save on a busy host
	// does not flap the state, while a hung guard turns unhealthy quickly.
	MaxHeartbeatAge = 3 * time.Second
	// HostRoot is where the guard container sees the host's root filesystem.
	HostRoot = "/host"
)

// Options of Run. Zero values: DefaultInterval, the iptables on this
// machine's PATH (no chroot), no links, HeartbeatFile, no logging.
type Options struct {
	Interval time.Duration
	Root     string // run iptables chrooted here (HostRoot in the container)
	// Links are "name=target" symbolic links to make in Root first: the
	// host's top-level links (lib -> usr/lib on merged-/usr systems).
	Links     []string
	Heartbeat string
	Logger    logging.Logger
}

// makeRoot recreates the host's top-level links in root and the
// directories iptables may write (the legacy backend's lock in /run).
func makeRoot(root string, links []string) error {
	if root == "" {
		return nil
	}
	for _, l := range links {
		name, target, ok := strings.Cut(l, "=")
		if !ok || name == "" || strings.Contains(name, "/") || target == "" {
			return fmt.Errorf("guard: bad link %q, want name=target", l)
		}
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("guard: %w", err)
		}
	}
	for _, d := range []string{"run", "tmp", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return fmt.Errorf("guard: %w", err)
		}
	}
	return nil
}

// Iptables runs iptables-save and iptables-restore, optionally chrooted.
type Iptables struct {
	Root          string
	save, restore string
}

// iptablesDirs are where distributions install iptables; looked up inside
// Root without following links (the links are absolute and only resolve
// once the child has chrooted).
var iptablesDirs = []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin"}

// NewIptables finds iptables-save and iptables-restore under root ("" = /).
func NewIptables(root string) (*Iptables, error) {
	find := func(name string) (string, error) {
		for _, d := range iptablesDirs {
			p := filepath.Join(d, name)
			if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
				return p, nil
			}
		}
		return "", fmt.Errorf("%w: %s not found under %s in %v", firewall.ErrNoIptables, name, orSlash(root), iptablesDirs)
	}
	i := &Iptables{Root: root}
	var err error
	if i.save, err = find("iptables-save"); err != nil {
		return nil, err
	}
	if i.restore, err = find("iptables-restore"); err != nil {
		return nil, err
	}
	return i, nil
}

func orSlash(s string) string {
	if s == "" {
		return "/"
	}
	return s
}

func (i *Iptables) command(ctx context.Context, path string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if i.Root != "" {
		// The kernel resolves path (and its links) after the chroot, so
		// the host's own binary, loader and libraries run.
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: i.Root}
		cmd.Dir = "/"
	}
	return cmd
}

// Read returns the live rules of the chains set cares about, from one
// iptables-save of the filter table (one process per check, not one per chain).
func (i *Iptables) Read(ctx context.Context, set firewall.Set) (firewall.Live, error) {
	cmd := i.command(ctx, i.save, "-t", "filter")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return firewall.Live{}, fmt.Errorf("iptables-save: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return ParseSave(out.String(), set), nil
}

// ParseSave picks the owned chains and the parents of set out of
// iptables-save output. Its -A lines have the same form as iptables -S.
func ParseSave(text string, set firewall.Set) firewall.Live {
	want := map[string]bool{}
	for _, c := range set.Chains {
		want[c] = true
	}
	parent := map[string]bool{}
	for _, j := range set.Jumps {
		parent[j.Parent] = true
	}
	l := firewall.Live{Chains: map[string][]string{}, Parents: map[string][]string{}}
	table := ""
	for _, ln := range strings.Split(text, "\n") {
		ln = strings.TrimRight(ln, "\r")
		switch {
		case strings.HasPrefix(ln, "*"):
			table = ln[1:]
		case table != "filter":
		case strings.HasPrefix(ln, ":"):
			name, _, _ := strings.Cut(ln[1:], " ")
			if want[name] && l.Chains[name] == nil {
				l.Chains[name] = []string{}
			}
			if parent[name] && l.Parents[name] == nil {
				l.Parents[name] = []string{}
			}
		case strings.HasPrefix(ln, "-A "):
			name, _, _ := strings.Cut(ln[3:], " ")
			if want[name] {
				l.Chains[name] = append(l.Chains[name], ln)
			}
			if parent[name] {
				l.Parents[name] = append(l.Parents[name], ln)
			}
		}
	}
	return l
}

// Restore loads an iptables-restore --noflush batch in one transaction.
func (i *Iptables) Restore(ctx context.Context, text string) error {
	cmd := i.command(ctx, i.restore, "--noflush", "-w", "10")
	cmd.Stdin = strings.NewReader(text)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("iptables-restore: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Enforce checks set once and re-applies it when it differs. It returns
// what it found different (nil: in place and untouched) and an error when
// the set is still not in place afterwards.
func (i *Iptables) Enforce(ctx context.Context, set firewall.Set) ([]string, error) {
	live, err := i.Read(ctx, set)
	if err != nil {
		return nil, err
	}
	diff := firewall.Diff(set, live)
	if len(diff) == 0 {
		return nil, nil
	}
	if _, ok := live.Parents[firewall.DockerUser]; !ok {
		// Docker makes DOCKER-USER when it starts; until then there is
		// nothing to jump from, and nothing of ours may run either.
		return diff, fmt.Errorf("firewall apply: %w", firewall.ErrNoDockerUser)
	}
	if err := i.Restore(ctx, firewall.ApplyText(set, live)); err != nil {
		return diff, err
	}
	if live, err = i.Read(ctx, set); err != nil {
		return diff, err
	}
	if still := firewall.Diff(set, live); len(still) > 0 {
		return diff, fmt.Errorf("firewall still differs after restore: %s", strings.Join(still, "; "))
	}
	return diff, nil
}

// Run keeps set in force until ctx ends: check, re-apply when needed,
// refresh the heartbeat only when the set is in place. The heartbeat is
// removed first thing and whenever the set is found missing, so the health
// check fails from the moment the guard knows.
func Run(ctx context.Context, set firewall.Set, o Options) error {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Heartbeat == "" {
		o.Heartbeat = HeartbeatFile
	}
	log := logging.Or(o.Logger)
	if err := makeRoot(o.Root, o.Links); err != nil {
		return err
	}
	ipt, err := NewIptables(o.Root)
	if err != nil {
		return err
	}
	if err := removeHeartbeat(o.Heartbeat); err != nil {
		return err
	}
	log.Info("guarding", "owner", set.Owner, "chains", strings.Join(set.Chains, ","), "interval", o.Interval.String())
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*o.Interval+10*time.Second)
		diff, err := ipt.Enforce(cctx, set)
		cancel()
		switch {
		case err != nil:
			if rerr := removeHeartbeat(o.Heartbeat); rerr != nil {
				log.Error("remove heartbeat", "error", rerr)
			}
			log.Warn("rules not in force", "error", err, "differences", strings.Join(diff, "; "))
		default:
			if len(diff) > 0 {
				log.Warn("rules restored", "differences", strings.Join(diff, "; "))
			}
			if err := writeHeartbeat(o.Heartbeat, time.Now()); err != nil {
				log.Error("write heartbeat", "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return removeHeartbeat(o.Heartbeat)
		case <-t.C:
		}
	}
}

func removeHeartbeat(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// writeHeartbeat replaces the file atomically with the time of the check.
func writeHeartbeat(path string, at time.Time) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(at.UnixNano(), 10)), 0o644); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// Healthy is the health check: nil when the heartbeat was written within
// maxAge, else what is wrong.
func Healthy(path string, maxAge time.Duration, now time.Time) error {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return errors.New("no heartbeat: the rules have not been seen in force since the guard started")
	}
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if age := now.Sub(time.Unix(0, ns)); age > maxAge {
		return fmt.Errorf("heartbeat is %s old (limit %s): the guard stopped confirming the rules", age.Round(time.Millisecond), maxAge)
	}
	return nil
}

// EncodeParams and DecodeParams carry a topology's firewall parameters on
// the guard's command line.
func EncodeParams(p firewall.Params) (string, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("guard params: %w", err)
	}
	return string(raw), nil
}

// DecodeParams is the inverse of EncodeParams; it refuses parameters
// without a topology name or subnets, which would build an empty guard.
func DecodeParams(s string) (firewall.Params, error) {
	var p firewall.Params
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return p, fmt.Errorf("guard params: %w", err)
	}
	if !firewall.ValidName(p.Name) || !p.LLMNet.IsValid() || !p.FetchNet.IsValid() || !p.EgressNet.IsValid() || !p.ProxyIP.IsValid() {
		return p, errors.New("guard params: a valid name, the three subnets and the proxy address are required")
	}
	return p, nil
}

// EncodeBridge and DecodeBridge carry a managed bridge's firewall
// parameters on the guard's command line.
func EncodeBridge(p firewall.BridgeParams) (string, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("guard bridge params: %w", err)
	}
	return string(raw), nil
}

// DecodeBridge is the inverse of EncodeBridge; it refuses parameters that
// would build rules matching nothing.
func DecodeBridge(s string) (firewall.BridgeParams, error) {
	var p firewall.BridgeParams
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return p, fmt.Errorf("guard bridge params: %w", err)
	}
	if !firewall.ValidName(p.Name) || !firewall.ValidInterface(p.Interface) || !p.Subnet.IsValid() {
		return p, errors.New("guard bridge params: a valid name, interface name and subnet are required")
	}
	return p, nil
}
