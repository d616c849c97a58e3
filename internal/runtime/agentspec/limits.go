package agentspec

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The limits of a per-message sandbox and their defaults. They are the one
// source of these numbers: the runner's config, the provider's schema and
// its docs all take them from here.
const (
	// DefaultMemoryLimit is DefaultMemoryBytes as the schema writes it.
	DefaultMemoryLimit = "512m"
	DefaultMemoryBytes = 512 << 20
	// MinMemoryBytes is Docker's own lower bound for a memory limit.
	MinMemoryBytes     = 6 << 20
	MinMemoryLimitText = "6m"

	DefaultPidsLimit = 256
	MinPidsLimit     = 16
	MaxPidsLimit     = 1 << 20

	DefaultTimeoutSeconds = 300
	MaxTimeoutSeconds     = 86400
	DefaultTimeout        = DefaultTimeoutSeconds * time.Second

	// DefaultUser is nobody, the user of a message pod on a cluster when
	// none is set. A per-message container on a Docker host never runs as
	// nobody (UserFor): every unprivileged daemon of the host shares it.
	DefaultUser = "65534:65534"
	// DefaultUID and DefaultGID are DefaultUser's numbers.
	DefaultUID = 65534
	DefaultGID = 65534
)

// MinHostMemory is the least memory_limit host mode accepts: measured, the
// agent loop dies at start under RLIMIT_DATA of 64 MiB and runs under 96 MiB.
const (
	MinHostMemory     = 128 << 20
	MinHostMemoryText = "128m"
)

// TmpBytes is the /tmp tmpfs size of a per-message container or pod;
// TmpSize is how Docker's tmpfs option and the docs write it.
const (
	TmpBytes = 256 << 20
	TmpSize  = "256m"
)

// sizePattern is the one form of a Size (ParseSize): a positive integer
// and an optional b/k/m/g unit ("512m", "1g"). Docker accepts more
// (fractions, "MiB"), but one form is what the docs promise.
var sizePattern = regexp.MustCompile(`^[0-9]+[bkmgBKMG]?$`)

// User is a numeric user and group.
type User struct{ UID, GID int }

// String is the "uid:gid" form Docker takes.
func (u User) String() string { return strconv.Itoa(u.UID) + ":" + strconv.Itoa(u.GID) }

// userExample is what an error shows as a well-formed user.
const userExample = "3000:3000"

// userPattern is a numeric uid or uid:gid: a name would mean something
// different in every image, and the workspace is chowned to the numbers.
var userPattern = regexp.MustCompile(`^[0-9]{1,10}(:[0-9]{1,10})?$`)

// ParseUser is the one parser of a sandbox user: a numeric "uid" (then the
// gid is the same) or "uid:gid"; empty means DefaultUser. Root (uid or gid
// 0) is refused: the agent never runs as root.
func ParseUser(s string) (User, error) {
	if s == "" {
		s = DefaultUser
	}
	if !userPattern.MatchString(s) {
		return User{}, fmt.Errorf("%q: must be a numeric uid or uid:gid, e.g. %s", s, userExample)
	}
	uid, gid, found := strings.Cut(s, ":")
	if !found {
		gid = uid
	}
	var u User
	for _, f := range []struct {
		text string
		dst  *int
	}{{uid, &u.UID}, {gid, &u.GID}} {
		n, err := strconv.ParseUint(f.text, 10, 32)
		if err != nil {
			return User{}, fmt.Errorf("%q: %s is not a 32-bit id", s, f.text)
		}
		*f.dst = int(n)
	}
	if u.UID == 0 || u.GID == 0 {
		return User{}, fmt.Errorf("%q: the agent never runs as root (uid or gid 0); use e.g. %s", s, userExample)
	}
	return u, nil
}

// AgentUser is the per-message container's user when none is configured:
// the agent's own uid, derived from its id as host mode derives it
// (AgentUID), with the group of the same number. No two agents of a host
// share it (but by a hash collision, which deploy refuses), and it lies far
// above the ids a host hands out, so no host process (nobody among them)
// owns the agent's workspace.
func AgentUser(agentID string) User {
	uid := AgentUID(agentID)
	return User{UID: uid, GID: uid}
}

// UserFor is the one reading of a per-message container's user on a
// Docker host: unset is AgentUser, and nobody (65534) is refused even when
// named, since whatever runs as nobody on the host would own the agent's
// workspace.
func UserFor(agentID string, s UserSpec) (User, error) {
	if s.IsZero() {
		return AgentUser(agentID), nil
	}
	u := s.User()
	if u.UID == DefaultUID || u.GID == DefaultGID {
		return User{}, fmt.Errorf("%q: nobody (65534) is shared by every unprivileged daemon of the host, which would own the "+
			"agent's workspace; leave user unset for the agent's own uid (%s)", s, AgentUser(agentID))
	}
	return u, nil
}

// Agent uids. A host-mode agent runs under a uid of its own, so that Unix
// permissions keep it from the runner's files (its config, the state
// directory) and chmod/chown on them fail, whatever Landlock allows. The
// uid is derived from the agent id (AgentUID) unless the host backend is
// given one; its group is the same number. A container on a Docker host
// takes the same uid by default (AgentUser).
const (
	// AgentUIDBase and AgentUIDRange place derived uids far above the ids
	// distributions hand out (system < 1000, users < 60000, subordinate
	// ranges from 100000 in blocks of 65536 for a few thousand users).
	AgentUIDBase  = 2_000_000_000
	AgentUIDRange = 100_000_000
)

// AgentUID is the uid host mode runs agentID under when none is
// configured: a stable hash of the id in [AgentUIDBase, AgentUIDBase +
// AgentUIDRange). Two agents meet on one uid with a chance of about
// n²/2·10⁻⁸ for n agents on a host; even then Landlock keeps each out of
// the other's workspace.
func AgentUID(agentID string) int {
	h := fnv.New32a()
	h.Write([]byte(agentID))
	return AgentUIDBase + int(h.Sum32()%AgentUIDRange)
}
