package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

// MinHostMemory is the least memory_limit host mode accepts: measured, the
// agent loop dies at start under RLIMIT_DATA of 64 MiB and runs under 96 MiB.
const (
	MinHostMemory     = 128 << 20
	MinHostMemoryText = "128m"
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
	// MemoryLimit is a Docker size ("512m"); default DefaultMemoryLimit. It
	// becomes RLIMIT_DATA of every process of the agent.
	MemoryLimit string
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
	Logger  hclog.Logger
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
}

// NewHost checks the options. It does not require Landlock: each message
// checks the kernel and fails closed, so /healthz can still report why.
func NewHost(o HostOptions) (*Host, error) {
	if err := CheckWorkspace(o.Workspace); err != nil {
		return nil, fmt.Errorf("host backend: %w", err)
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
	mem, err := MemoryBytes(o.MemoryLimit)
	if err != nil {
		return nil, fmt.Errorf("host backend: %w", err)
	}
	if mem < MinHostMemory {
		return nil, fmt.Errorf("host backend: memory_limit %q is below %s, the least the agent loop starts with in host mode "+
			"(RLIMIT_DATA also counts the Go runtime's reserved bookkeeping, about 64 MiB)", o.MemoryLimit, MinHostMemoryText)
	}
	pids := o.PidsLimit
	if pids <= 0 {
		pids = DefaultPidsLimit
	}
	if !o.FileAccess.Unrestricted {
		if err := landlock.Validate(o.FileAccess); err != nil {
			return nil, fmt.Errorf("host backend: %w", err)
		}
	}
	home := o.FileAccess.HomeDir
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	h := &Host{opts: o, log: o.Logger, memBytes: mem, pids: pids, home: home}
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

// Ready is always true: a process start is a few milliseconds, so there is
// nothing to prepare ahead.
func (h *Host) Ready() bool { return true }

// Close has nothing to release: every message's child is gone when Run
// returns.
func (h *Host) Close(context.Context) error { return nil }

// Health reports the kernel's Landlock ABI for /healthz.
func (h *Host) Health() map[string]any {
	m := map[string]any{
		"landlock_abi":  landlock.DetectABI(),
		"unrestricted":  h.opts.FileAccess.Unrestricted,
		"process_limit": "rlimit",
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
		Protect:      h.opts.Protect,
	})
}

// Run runs one message. It returns an error, and runs nothing, when the
// rules cannot be compiled or the kernel cannot enforce them (fail closed).
func (h *Host) Run(ctx context.Context, job Job) (Outcome, error) {
	begin := time.Now()
	tmp, err := os.MkdirTemp(h.opts.TmpRoot, "meepa-tmp-")
	if err != nil {
		return Outcome{}, fmt.Errorf("private tmpdir: %w", err)
	}
	defer os.RemoveAll(tmp)

	child, err := h.childConfig(tmp)
	if err != nil {
		return Outcome{}, err
	}
	cg := newPidsCgroup(h.opts.AgentID, h.pids)
	if cg == nil {
		// RLIMIT_NPROC counts every task of the uid, not of the agent:
		// allow pids_limit more than the uid runs now. Shared with the
		// uid's other processes, and not binding for uid 0 at all.
		child.NProc = uint64(h.pids + userTasks(os.Getuid()))
	}
	defer cg.remove()
	cfgJSON, err := json.Marshal(child)
	if err != nil {
		return Outcome{}, fmt.Errorf("agent child config: %w", err)
	}

	timeout := job.Timeout
	if timeout <= 0 {
		timeout = 300 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// Closing an end twice is harmless; the deferred close catches every
	// early return.
	var pipes [6]*os.File
	defer func() {
		for _, f := range pipes {
			if f != nil {
				f.Close()
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
		ExtraFiles: []*os.File{cfgR},
		// Its own session: the agent loop puts each tool command in a
		// process group of its own, but all stay in this session (the
		// socket filter refuses setsid), which is how the timeout and the
		// end of the message find them. SIGKILL if the runner dies first.
		SysProcAttr: childProcAttr(),
		// Stdin is copied by os/exec; a background process that kept it
		// open must not hold Wait.
		WaitDelay: 2 * time.Second,
	}
	if err := cmd.Start(); err != nil {
		return Outcome{}, fmt.Errorf("start agent child: %w", err)
	}
	pid := cmd.Process.Pid
	out := Outcome{SandboxID: "pid:" + strconv.Itoa(pid), StartLatency: time.Since(begin)}
	// Only the child holds these ends now; EOF on the read ends then means
	// every process of the agent has closed them.
	outW.Close()
	errW.Close()
	cfgR.Close()
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
	cfgW.Close()

	stdout := &capped{max: MaxStdout}
	stderr := &tail{max: StderrTailLen}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); _, _ = io.Copy(stdout, outR) }()
	go func() { defer readers.Done(); _, _ = io.Copy(stderr, bufio.NewReader(errR)) }()

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-ctx.Done():
		out.TimedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
		killSession(pid)
		cg.killAll()
		<-waited
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
		outR.Close()
		errR.Close()
		<-drained
	}

	out.Stdout = stdout.buf
	out.StderrTail = stderr.bytes()
	return out, exitState(ctx, &out, cmd.ProcessState, stdout.over)
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
		return fmt.Errorf("reply larger than %d bytes", MaxStdout)
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

// userTasks counts the tasks (threads) whose real uid is uid, as
// RLIMIT_NPROC does.
func userTasks(uid int) int64 {
	entries, _ := os.ReadDir("/proc")
	var n int64
	want := strconv.Itoa(uid)
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var real string
		var threads int64
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					real = f[0]
				}
			} else if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				threads, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
		if real == want {
			n += threads
		}
	}
	return n
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

// pidsCgroup is a per-message child of this process's pids cgroup, when
// this process may make one (cgroup v1 pids controller, or v2 with pids
// enabled for its children). It bounds the agent's tasks and finds the
// ones that left the process group.
type pidsCgroup struct{ dir string }

func newPidsCgroup(agentID string, max int64) *pidsCgroup {
	parent := pidsCgroupParent()
	if parent == "" {
		return nil
	}
	var b [cgroupSuffixBytes]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(parent, "meepa-"+safeName(agentID)+"-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(max, 10)), 0o644); err != nil {
		_ = os.Remove(dir)
		return nil
	}
	return &pidsCgroup{dir: dir}
}

// pidsCgroupParent is this process's pids cgroup directory when it has one
// it may write, else "".
func pidsCgroupParent() string {
	raw, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir = filepath.Join("/sys/fs/cgroup", parts[2])
			ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
			if err != nil || !strings.Contains(" "+string(ctl)+" ", " pids ") {
				continue
			}
		case strings.Contains(","+parts[1]+",", ",pids,"):
			dir = filepath.Join("/sys/fs/cgroup/pids", parts[2])
		default:
			continue
		}
		if syscall.Access(dir, 2 /* W_OK */) == nil {
			return dir
		}
	}
	return ""
}

// sweepPidsCgroups removes the empty per-message cgroups a crashed runner of
// this agent left behind (a cgroup with tasks in it refuses rmdir).
func sweepPidsCgroups(agentID string) {
	parent := pidsCgroupParent()
	if parent == "" {
		return
	}
	left, _ := filepath.Glob(filepath.Join(parent, cgroupPattern(agentID)))
	for _, dir := range left {
		_ = os.Remove(dir)
	}
}

// cgroupSuffixBytes is the random part of a per-message cgroup's name.
const cgroupSuffixBytes = 6

// cgroupPattern matches the per-message cgroups of agentID and of no other
// agent: "meepa-a-*" would also match agent "a-b"'s, and the sweep could
// remove one of them between its mkdir and its first task.
func cgroupPattern(agentID string) string {
	return "meepa-" + safeName(agentID) + "-" + strings.Repeat("[0-9a-f]", 2*cgroupSuffixBytes)
}

func (c *pidsCgroup) add(pid int) error {
	if c == nil {
		return nil
	}
	return os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

func (c *pidsCgroup) killAll() {
	if c == nil {
		return
	}
	for range 10 {
		raw, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
		if err != nil || len(bytes.TrimSpace(raw)) == 0 {
			return
		}
		for _, f := range strings.Fields(string(raw)) {
			if p, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *pidsCgroup) remove() {
	if c == nil {
		return
	}
	c.killAll()
	for range 50 {
		if err := os.Remove(c.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "agent"
	}
	return b.String()
}
