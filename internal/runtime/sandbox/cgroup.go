package sandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The host backend's process limit: a pids cgroup per message when the
// runner may make one, else RLIMIT_NPROC over the tasks of the agent's uid.

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
