package agent

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// oomFiles are where the kernel counts OOM kills of the calling process's
// cgroup, as a container with its own cgroup namespace sees it: cgroup v2,
// then the v1 memory controller.
var oomFiles = []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}

// ContainerOOMKills is how many processes the kernel killed for memory in
// this container's cgroup, and whether that could be read. Only a
// container's init may ask: elsewhere the files describe some other group.
func ContainerOOMKills() (int, bool) {
	for _, f := range oomFiles {
		if n, ok := oomKills(f); ok {
			return n, true
		}
	}
	return 0, false
}

func oomKills(path string) (int, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer func() { _ = f.Close() }() // read-only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			return n, err == nil
		}
	}
	return 0, false
}
