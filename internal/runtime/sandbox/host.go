package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

// HostOptions configure the host backend. Zero values are the documented
// defaults.
type HostOptions struct {
	AgentID string
	// Workspace is the agent's workspace: the child's HOME and working
	// directory, always read-write.
	Workspace  string
	FileAccess landlock.FileAccess
	// RunnerBinary is the agent-runner executable the child runs
	// (`landlock-exec`, which execs `agent-run`); default: this process's
	// own executable.
	RunnerBinary string
	// MemoryLimit becomes RLIMIT_DATA of every process of the agent;
	// unset: agentspec.DefaultMemoryBytes.
	MemoryLimit agentspec.Size
	// PidsLimit bounds the agent's processes and threads; default
	// DefaultPidsLimit. Enforced with a pids cgroup when this process may
	// make one, else with RLIMIT_NPROC.
	PidsLimit int64
	// TmpRoot is where each message's private TMPDIR is made; default
	// os.TempDir().
	TmpRoot string
	// Env is extra non-secret environment for the agent loop (e.g. a
	// ThreeGate role's http_proxy).
	Env map[string]string
	// Protect are paths the agent never reaches whatever FileAccess allows
	// (see landlock.Spec.Protect); nothing without Landlock.
	Protect []string
	// StateDir is the provider's state directory (<state_dir>, holding
	// runners/ and agents/), when the runner knows it: everything in it
	// but the agent's own workspace is denied, so that no allow reaches
	// another agent's workspace or a runner's files.
	StateDir string
	// UID is the dedicated uid (and gid) the agent runs under; 0: derived
	// from AgentID (AgentUID). Used when the runner may switch uid
	// (CAP_SETUID, CAP_SETGID and CAP_CHOWN: a runner running as root).
	UID int
	// RelayPair, when set, makes the message's connection to the runner's
	// LLM relay: the child inherits child (at fd 4); stop ends the
	// relay's side after the message. Nil when the agent uses no relay.
	RelayPair func() (child *os.File, stop func(), err error)
	Logger    hclog.Logger
}

// Host runs each message as a fresh child process on this machine: the
// child (`agent-runner landlock-exec`) restricts itself with the agent's
// Landlock ruleset, drops every capability, installs a socket filter and
// only then execs `agent-runner agent-run`, which reads the request. The
// runner itself is never restricted.
//
// Memory: RLIMIT_DATA, not RLIMIT_AS. The Go runtime reserves about 700 MB
// of address space at start (measured: agent-runner dies at start under
// `ulimit -v 524288` and runs under 786432), so an address-space limit equal
// to memory_limit would stop every Go program, while RLIMIT_DATA counts the
// private writable memory actually mapped, which is what a heap grows.
// Like any rlimit it is per process.
type Host struct {
	opts     HostOptions
	log      hclog.Logger
	memBytes int64
	pids     int64
	home     string
	// user is the agent's dedicated uid, nil when the runner cannot
	// switch uid (then the agent runs as the runner's uid, which the
	// runner warns about at start).
	user *landlock.ChildUser
	// hide: this runner may mount, so a deny inside an allow is hidden by
	// a mount in the child's own mount namespace rather than expanded
	// around.
	hide bool
	// covered: denies inside an allow that the deployment already covers
	// with an empty read-only mount (the runner container's own mounts).
	covered []string
}

// NewHost checks the options. It does not require Landlock: each message
// checks the kernel and fails closed, so /healthz can still report why.
func NewHost(o HostOptions) (*Host, error) {
	if err := CheckWorkspace(o.Workspace); err != nil {
		return nil, fmt.Errorf("host backend: %w", err)
	}
	if err := CheckNoSymlinks(o.Workspace); err != nil {
		return nil, fmt.Errorf("host backend: workspace %w", err)
	}
	if o.RunnerBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("host backend: locate agent-runner: %w", err)
		}
		o.RunnerBinary = exe
	}
	if o.TmpRoot == "" {
		o.TmpRoot = os.TempDir()
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	mem := agentspec.MemoryOrDefault(o.MemoryLimit).Bytes()
	if mem < agentspec.MinHostMemory {
		return nil, fmt.Errorf("host backend: memory_limit %q is below %s, the least the agent loop starts with in host mode "+
			"(RLIMIT_DATA also counts the Go runtime's reserved bookkeeping, about 64 MiB)", o.MemoryLimit, agentspec.MinHostMemoryText)
	}
	pids := o.PidsLimit
	if pids <= 0 {
		pids = agentspec.DefaultPidsLimit
	}
	if !o.FileAccess.Unrestricted {
		if err := agentspec.ValidateFileAccess(o.FileAccess); err != nil {
			return nil, fmt.Errorf("host backend: %w", err)
		}
	}
	home := o.FileAccess.HomeDir
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	h := &Host{opts: o, log: o.Logger, memBytes: mem, pids: pids, home: home}
	if !o.FileAccess.Unrestricted {
		if err := h.setupIdentity(); err != nil {
			return nil, fmt.Errorf("host backend: %w", err)
		}
	}
	if !o.FileAccess.Unrestricted {
		// A contradiction in the rules (a deny over the workspace) is a
		// config error: say so at start, not only at the first message.
		if _, err := h.Ruleset(o.TmpRoot); err != nil {
			return nil, fmt.Errorf("host backend: landlock rules: %w", err)
		}
	}
	sweepPidsCgroups(o.AgentID)
	if o.FileAccess.Unrestricted {
		h.log.Warn("host mode UNRESTRICTED: agents run without Landlock file access rules (file_access.unrestricted or serve --unrestricted)",
			"workspace", o.Workspace)
	}
	return h, nil
}

// setupIdentity picks the agent's uid and whether denied paths can be
// hidden, from what this process may do, and gives the workspace to that
// uid.
func (h *Host) setupIdentity() error {
	caps := effectiveCaps()
	covered, err := coveredDenies(h.opts.FileAccess)
	if err != nil {
		return err
	}
	h.covered = covered
	h.hide = hasCaps(caps, capSysAdmin)
	if !h.hide {
		for _, w := range landlock.ExpandedDenies(h.opts.FileAccess, covered...) {
			h.log.Warn("host mode: "+w, "workspace", h.opts.Workspace)
		}
	}
	if !hasCaps(caps, capSetuid, capSetgid, capChown) {
		h.log.Warn("host mode: the agent runs under the runner's own uid, since the runner lacks CAP_SETUID, CAP_SETGID or CAP_CHOWN "+
			"(it does not run as root): Unix permissions do not protect the runner's files from it, only Landlock does, "+
			"and it can chmod what it owns; run the runner as root for a dedicated agent uid",
			"uid", os.Getuid())
		return nil
	}
	uid := h.opts.UID
	if uid == 0 {
		uid = agentspec.AgentUID(h.opts.AgentID)
	}
	if uid < 0 {
		return fmt.Errorf("agent uid %d: want a positive uid", uid)
	}
	// The provider makes <state_dir> and agents/ 0700; the agent's uid
	// passes through them by the agents' group alone (search only: it
	// still cannot list them, and every workspace in them is its own
	// uid's, mode 0700), never by a grant to others, which would let any
	// host process (nobody among them) reach a workspace owned by a uid
	// it has.
	groups := []int{AgentsGID}
	if sd := h.opts.StateDir; sd != "" && filepath.Dir(h.opts.Workspace) == filepath.Join(sd, "agents") {
		if who := HostIDInUse(-1, AgentsGID); who != "" {
			return fmt.Errorf("the agents' group %d is the host's %s: host-mode agents cannot be given a group of their own", AgentsGID, who)
		}
		for _, dir := range []string{sd, filepath.Dir(h.opts.Workspace)} {
			// Under a runner container these are the container's own
			// read-only parents of its mounts, not the host's.
			if err := HoldStateDir(dir, true); err != nil && !errors.Is(err, unix.EROFS) {
				return err
			}
		}
	}
	if err := searchableBy(h.opts.Workspace, uid, uid, groups...); err != nil {
		return fmt.Errorf("workspace %s: %w", h.opts.Workspace, err)
	}
	if err := ChownTree(h.opts.Workspace, uid, uid); err != nil {
		return fmt.Errorf("workspace: give it to the agent's uid %d: %w", uid, err)
	}
	// Its own uid only: other agents (other uids) cannot enter it.
	if err := os.Chmod(h.opts.Workspace, 0o700); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	h.user = &landlock.ChildUser{UID: uid, GID: uid, Groups: groups}
	return nil
}

// stateProtect are the entries of the state directory the agent never
// reaches: everything but its own workspace (other agents' workspaces, the
// runners' configs and sockets).
func (h *Host) stateProtect() []string {
	if h.opts.StateDir == "" {
		return nil
	}
	var out []string
	entries, _ := os.ReadDir(h.opts.StateDir)
	agents := filepath.Join(h.opts.StateDir, "agents")
	for _, e := range entries {
		p := filepath.Join(h.opts.StateDir, e.Name())
		if p != agents || filepath.Dir(h.opts.Workspace) != agents {
			if !within(h.opts.Workspace, p) {
				out = append(out, p)
			}
			continue
		}
		others, _ := os.ReadDir(agents)
		for _, o := range others {
			if q := filepath.Join(agents, o.Name()); q != h.opts.Workspace {
				out = append(out, q)
			}
		}
	}
	return out
}

func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// Ready is always true: a process start is a few milliseconds, so there is
// nothing to prepare ahead.
func (h *Host) Ready() bool { return true }

// RelayLink: the child inherits its relay connection (RelayPair).
func (h *Host) RelayLink() RelayLink { return RelayInherited }

// Close has nothing to release: every message's child is gone when Run
// returns.
func (h *Host) Close(context.Context) error { return nil }

// Health reports the kernel's Landlock ABI for /healthz.
func (h *Host) Health() map[string]any {
	m := map[string]any{
		"landlock_abi":  landlock.DetectABI(),
		"unrestricted":  h.opts.FileAccess.Unrestricted,
		"process_limit": "rlimit",
		// The runner's own uid, or the agent's dedicated one.
		"agent_uid":   os.Getuid(),
		"deny_inside": "expand",
	}
	if h.user != nil {
		m["agent_uid"] = h.user.UID
	}
	if h.hide || (len(h.covered) > 0 && len(landlock.ExpandedDenies(h.opts.FileAccess, h.covered...)) == 0) {
		m["deny_inside"] = "mount"
	}
	if dir := pidsCgroupParent(); dir != "" {
		m["process_limit"] = "cgroup"
	}
	return m
}

// Ruleset compiles the agent's rules for a message whose TMPDIR is tmp.
func (h *Host) Ruleset(tmp string) (*landlock.Ruleset, error) {
	return landlock.Compile(landlock.Spec{
		FileAccess:   h.opts.FileAccess,
		Workspace:    h.opts.Workspace,
		TmpDir:       tmp,
		RunnerBinary: h.opts.RunnerBinary,
		Home:         h.home,
		Protect:      append(slices.Clone(h.opts.Protect), h.stateProtect()...),
		Hide:         h.hide,
		Covered:      h.covered,
	})
}

// Run runs one message. It returns an error, and runs nothing, when the
// rules cannot be compiled or the kernel cannot enforce them (fail closed).
func (h *Host) Run(ctx context.Context, job Job) (Outcome, error) {
	begin := time.Now()
	// The agent could have replaced its workspace (or a parent it may
	// write) by a link since the last message.
	if err := CheckNoSymlinks(h.opts.Workspace); err != nil {
		return Outcome{}, fmt.Errorf("workspace %w", err)
	}
	tmp, err := os.MkdirTemp(h.opts.TmpRoot, "meepa-tmp-")
	if err != nil {
		return Outcome{}, fmt.Errorf("private tmpdir: %w", err)
	}
	defer h.removeAll(tmp)
	uid := os.Getuid()
	if h.user != nil {
		uid = h.user.UID
		if err := os.Chown(tmp, h.user.UID, h.user.GID); err != nil {
			return Outcome{}, fmt.Errorf("private tmpdir: %w", err)
		}
	}

	child, err := h.childConfig(tmp)
	if err != nil {
		return Outcome{}, err
	}
	hides := child.Ruleset != nil && len(child.Ruleset.Hide) > 0
	if hides {
		dir, err := os.MkdirTemp(h.opts.TmpRoot, "meepa-hide-")
		if err != nil {
			return Outcome{}, fmt.Errorf("hide denied paths: %w", err)
		}
		defer h.removeAll(dir)
		child.EmptyFile = filepath.Join(dir, "empty")
		if err := os.WriteFile(child.EmptyFile, nil, 0o444); err != nil {
			return Outcome{}, fmt.Errorf("hide denied paths: %w", err)
		}
	}
	cg := newPidsCgroup(h.opts.AgentID, h.pids)
	if cg == nil {
		// RLIMIT_NPROC counts every task of the uid: allow pids_limit more
		// than the uid runs now. With a dedicated uid that is the agent's
		// own; under the runner's uid it is shared with the runner, and it
		// does not bind uid 0 at all.
		child.NProc = uint64(h.pids + userTasks(uid))
	}
	defer cg.remove()
	cfgJSON, err := json.Marshal(child)
	if err != nil {
		return Outcome{}, fmt.Errorf("agent child config: %w", err)
	}

	timeout := job.Timeout
	if timeout <= 0 {
		timeout = agentspec.DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var relayFiles []*os.File
	if h.opts.RelayPair != nil {
		relay, stop, err := h.opts.RelayPair()
		if err != nil {
			return Outcome{}, err
		}
		defer stop()
		// The child has its own copy once started: closing this one
		// loses nothing.
		defer func() { _ = relay.Close() }()
		relayFiles = append(relayFiles, relay)
	}

	// Closing an end twice is harmless; the deferred close catches every
	// early return.
	var pipes [6]*os.File
	defer func() {
		for _, f := range pipes {
			if f != nil {
				_ = f.Close() // a pipe end: nothing buffered to lose
			}
		}
	}()
	for i := 0; i < len(pipes); i += 2 {
		if pipes[i], pipes[i+1], err = os.Pipe(); err != nil {
			return Outcome{}, fmt.Errorf("agent child pipes: %w", err)
		}
	}
	cfgR, cfgW, outR, outW, errR, errW := pipes[0], pipes[1], pipes[2], pipes[3], pipes[4], pipes[5]

	cmd := &exec.Cmd{
		Path:       h.opts.RunnerBinary,
		Args:       []string{"agent-runner", "landlock-exec"},
		Env:        h.env(tmp),
		Dir:        h.opts.Workspace,
		Stdin:      bytes.NewReader(job.Stdin),
		Stdout:     outW,
		Stderr:     errW,
		ExtraFiles: append([]*os.File{cfgR}, relayFiles...),
		// Its own session: the agent loop puts each tool command in a
		// process group of its own, but all stay in this session (the
		// socket filter refuses setsid), which is how the timeout and the
		// end of the message find them. SIGKILL if the runner dies first.
		SysProcAttr: childProcAttr(),
		// Stdin is copied by os/exec; a background process that kept it
		// open must not hold Wait.
		WaitDelay: 2 * time.Second,
	}
	if hides {
		// A mount namespace of its own (Go makes its mounts private), where
		// the child covers the denied paths before it restricts itself.
		if err := unshareMounts(cmd.SysProcAttr); err != nil {
			return Outcome{}, fmt.Errorf("hide denied paths: %w", err)
		}
	}
	if err := cmd.Start(); err != nil {
		return Outcome{}, fmt.Errorf("start agent child: %w", err)
	}
	pid := cmd.Process.Pid
	out := Outcome{SandboxID: "pid:" + strconv.Itoa(pid), StartLatency: time.Since(begin)}
	// Only the child holds these ends now; EOF on the read ends then means
	// every process of the agent has closed them. The child has its own
	// copies: closing the runner's loses nothing.
	_ = outW.Close()
	_ = errW.Close()
	_ = cfgR.Close()
	if err := cg.add(pid); err != nil {
		// Without the cgroup the process limit would not hold: fail
		// closed rather than run unbounded.
		killSession(pid)
		_ = cmd.Wait()
		return out, fmt.Errorf("pids cgroup: %w", err)
	}
	// The child waits for its config before it does anything, so the
	// cgroup above holds it before it can fork.
	if _, err := cfgW.Write(cfgJSON); err != nil {
		killSession(pid)
		_ = cmd.Wait()
		return out, fmt.Errorf("hand rules to the agent child: %w", err)
	}
	// The config is in the pipe already (a pipe buffers nothing in this
	// process); the close is the EOF the child reads up to.
	_ = cfgW.Close()

	stdout := &Capped{Max: agentspec.MaxReplyBytes}
	stderr := &Tail{Max: StderrTailLen}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); _, _ = io.Copy(stdout, outR) }()
	go func() { defer readers.Done(); _, _ = io.Copy(stderr, bufio.NewReader(errR)) }()

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var waitErr error
	select {
	case waitErr = <-waited:
	case <-ctx.Done():
		out.TimedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
		killSession(pid)
		cg.killAll()
		waitErr = <-waited
	}
	// The exit status is read from cmd.ProcessState (exitState, below);
	// what Wait reports beyond it (stdin not taken in, WaitDelay passed)
	// changes no outcome but is worth a line.
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		h.log.Debug("agent child wait", "pid", pid, "error", waitErr)
	}
	// What the agent left running in the background goes with it.
	killSession(pid)
	cg.killAll()
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
		// A process that left the group (setsid) still holds the pipes;
		// stop reading rather than wait for it.
		_ = outR.Close() // read ends: what was read is kept
		_ = errR.Close()
		<-drained
	}

	out.Stdout = stdout.Buf
	out.StderrTail = stderr.Bytes()
	return out, exitState(ctx, &out, cmd.ProcessState, stdout.Over)
}

// removeAll removes a message's scratch directory. A failure leaves litter
// under TmpRoot, not a wrong reply: it is logged, not returned.
func (h *Host) removeAll(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		h.log.Warn("host mode: scratch directory not removed", "dir", dir, "error", err)
	}
}

// childConfig is what the child applies to itself before it execs the
// agent loop: the limits, and the Landlock rules unless unrestricted. It
// fails closed when the kernel cannot enforce the rules.
func (h *Host) childConfig(tmp string) (*landlock.ChildConfig, error) {
	child := &landlock.ChildConfig{DataLimit: uint64(h.memBytes)}
	if h.opts.FileAccess.Unrestricted {
		return child, nil
	}
	rs, err := h.Ruleset(tmp)
	if err != nil {
		return nil, fmt.Errorf("landlock rules: %w", err)
	}
	if err := rs.Check(landlock.DetectABI()); err != nil {
		return nil, err
	}
	for _, n := range rs.Notes {
		h.log.Debug("landlock", "note", n)
	}
	child.Ruleset = rs
	child.User = h.user
	return child, nil
}

// exitState fills in how the child ended and returns the error for a child
// that could not restrict itself, an oversized reply or a cancelled ctx.
func exitState(ctx context.Context, out *Outcome, ps *os.ProcessState, overflow bool) error {
	if ps != nil {
		out.ExitCode = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			out.ExitCode = 128 + int(ws.Signal())
		}
	}
	if out.ExitCode == landlock.ChildErrorExit {
		if msg, ok := childError(out.StderrTail); ok {
			return fmt.Errorf("sandbox setup failed, nothing ran: %s", msg)
		}
	}
	// RLIMIT_DATA ends a Go agent loop with "fatal error: runtime: out of
	// memory" (or "out of memory allocating ..."): the host backend's OOM.
	// Tool output never reaches this stderr, so a tool cannot fake it.
	if out.ExitCode != 0 && bytes.Contains(out.StderrTail, []byte("fatal error: ")) && bytes.Contains(out.StderrTail, []byte("out of memory")) {
		out.OOMKilled = true
	}
	if overflow {
		return ErrReplyTooLarge
	}
	if ctx.Err() != nil && !out.TimedOut {
		return ctx.Err()
	}
	return nil
}

func childError(stderr []byte) (string, bool) {
	for _, line := range strings.Split(string(stderr), "\n") {
		if msg, ok := strings.CutPrefix(line, landlock.ChildErrorPrefix); ok {
			return msg, true
		}
	}
	return "", false
}

// env is the child's whole environment: nothing of the runner's leaks in.
func (h *Host) env(tmp string) []string {
	env := map[string]string{}
	for k, v := range h.opts.Env {
		env[k] = v
	}
	env["HOME"] = h.opts.Workspace
	env["TMPDIR"] = tmp
	env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	env["LANG"] = "C.UTF-8"
	// Landlock's TCP rules do not see Multipath TCP, which Go (1.24+) uses
	// for listeners by default; the socket filter refuses MPTCP sockets
	// too, this keeps Go from trying.
	env["GODEBUG"] = "multipathtcp=0"
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// killSession kills the child's session: its process group, and every
// process whose session is the child's (tool commands run in process groups
// of their own). It repeats while it finds any, to catch forks in flight.
func killSession(sid int) {
	_ = syscall.Kill(-sid, syscall.SIGKILL)
	for range 10 {
		found := false
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == sid {
				continue
			}
			if sessionOf(pid) == sid {
				found = true
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if !found {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sessionOf reads the session id from /proc/<pid>/stat (-1 if unknown).
// The command name may hold spaces and parentheses, so fields are counted
// after the last ')': state, ppid, pgrp, session.
func sessionOf(pid int) int {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 4 {
		return -1
	}
	sid, err := strconv.Atoi(f[3])
	if err != nil {
		return -1
	}
	return sid
}
