package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// MetaFile is where an agent's Meta is kept.
func MetaFile(l Layout) string { return filepath.Join(l.Dir, "agent.json") }

// WriteMeta writes agent.json, 0600, replacing the old one at once.
func WriteMeta(l Layout, m agentspec.Meta) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("agent meta: %w", err)
	}
	tmp := MetaFile(l) + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return fmt.Errorf("agent meta: %w", err)
	}
	if err := os.Rename(tmp, MetaFile(l)); err != nil {
		return fmt.Errorf("agent meta: %w", err)
	}
	return nil
}

// ReadMeta reads agent.json.
func ReadMeta(l Layout) (agentspec.Meta, error) {
	var m agentspec.Meta
	raw, err := os.ReadFile(MetaFile(l))
	if errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("%s is missing", MetaFile(l))
	}
	if err != nil {
		return m, fmt.Errorf("agent meta: %w", err)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return m, fmt.Errorf("agent meta %s: %w", MetaFile(l), err)
	}
	return m, nil
}

// anyAddress is the listen address a runner in a container takes: it must
// listen on the container's interface for the port published on the host's
// 127.0.0.1.
const anyAddress = "0.0.0.0:"

// ServedListen is the listen address written into the runner's config: a
// containerised runner on a TCP port listens on every interface of its
// container; anything else listens where the host sees it.
func ServedListen(deployment string, l Listener) string {
	if deployment == agentspec.ModeContainer && l.Port != 0 {
		return anyAddress + strconv.Itoa(l.Port)
	}
	return l.String()
}

// HostListen turns a config's listen address back into the host's view
// (the inverse of ServedListen).
func HostListen(s string) string {
	if port, ok := strings.CutPrefix(s, anyAddress); ok {
		return "127.0.0.1:" + port
	}
	return s
}

// WorkspaceOwner says who must own the workspace: the per-message
// container's user in container mode (by default the agent's own uid,
// agentspec.AgentUser), the runner's (this process's) user in
// host mode, where the agent runs as the runner's child. When this process
// cannot hand the workspace over it returns nil and a warning.
func WorkspaceOwner(c agentspec.Config) (*workspace.Owner, string) {
	me := workspace.Owner{UID: os.Getuid(), GID: os.Getgid()}
	if !c.Container.Enabled {
		return &me, ""
	}
	u, err := agentspec.UserFor(c.AgentID, c.Container.User)
	if err != nil {
		// ValidateSettings refuses such a user before anything is made.
		return nil, fmt.Sprintf("container_mode.user: %v; the workspace keeps its owner.", err)
	}
	want := workspace.Owner{UID: u.UID, GID: u.GID}
	if me.UID == 0 || want == me {
		return &want, ""
	}
	return nil, fmt.Sprintf("The provider runs as uid %d and cannot hand the workspace to %d:%d (container_mode.user); "+
		"the per-message containers may be unable to write /workspace. Run the provider as root or set "+
		"container_mode.user = \"%d:%d\".", me.UID, want.UID, want.GID, me.UID, me.GID)
}

// CheckAgentUser refuses a derived sandbox user (container mode with
// container_mode.user unset) that is not the agent's alone: a uid or gid
// the host's passwd or group files name, or the owner of another agent's
// workspace in the same state directory (two ids whose hashes meet). The
// agent's owner then names a user. Explicit users are the owner's choice.
func (s *Service) CheckAgentUser(c agentspec.Config) error {
	if !c.Container.Enabled || !c.Container.User.IsZero() {
		return nil
	}
	u := agentspec.AgentUser(c.AgentID)
	fail := func(why string) error {
		return stepErr(agentspec.StepWorkspace, "container_mode.user", "choosing the sandbox user",
			fmt.Errorf("the agent's own uid %s (derived from agent_id) is %s; set container_mode.user to a uid:gid no one else uses", u, why))
	}
	if who := sandbox.HostIDInUse(u.UID, u.GID); who != "" {
		return fail("the host's " + who)
	}
	if u.GID == sandbox.AgentsGID {
		return fail("the host-mode agents' group")
	}
	agents := filepath.Join(s.o.StateDir, "agents")
	entries, err := os.ReadDir(agents)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return stepErr(agentspec.StepWorkspace, "", "reading "+agents, err)
	}
	for _, e := range entries {
		if e.Name() == c.AgentID || !e.IsDir() {
			continue
		}
		if o, ok := ownerOf(filepath.Join(agents, e.Name())); ok && (o.UID == u.UID || o.GID == u.GID) {
			return fail("also the owner of agent " + e.Name() + "'s workspace")
		}
	}
	return nil
}

// holdStateDirs keeps <state_dir>, agents/ and runners/ closed to others
// (sandbox.HoldStateDir): a grant of search to everyone left by an older
// release is taken back; the host-mode agents' group keeps its search.
func (s *Service) holdStateDirs() error {
	for _, d := range []string{s.o.StateDir, filepath.Join(s.o.StateDir, "agents"), filepath.Join(s.o.StateDir, "runners")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := sandbox.HoldStateDir(d, false); err != nil {
			return err
		}
	}
	return nil
}

// ownerOf is p's owner, without following a link; false when p is missing.
func ownerOf(p string) (workspace.Owner, bool) {
	fi, err := os.Lstat(p)
	if err != nil {
		return workspace.Owner{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return workspace.Owner{}, false
	}
	return workspace.Owner{UID: int(st.Uid), GID: int(st.Gid)}, true
}
