package sandbox

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

// LandlockSyscalls are what the host backend needs from a seccomp profile
// to restrict its per-message child with Landlock.
var LandlockSyscalls = []string{"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"}

// RunnerSeccompProfile is the seccomp profile for a runner container in
// host mode (deployment "container" without container mode): Docker's
// default profile, as the moby/profiles module has it, with the Landlock
// syscalls allowed. Pass it as HostConfig.SecurityOpt
// "seccomp=<profile JSON>".
//
// Why not the daemon's own default: Docker Engines before the default
// profile learned the landlock_* syscalls answer them with EPERM, so the
// runner would see "no Landlock" and, failing closed, refuse every message.
// (Docker 20.10.24 on this project's CI already allows them: the runner
// measured ABI 7 inside a container with the default profile; older
// engines and distributions' builds differ.) Never unconfined: the runner
// container keeps everything the default profile denies.
func RunnerSeccompProfile() ([]byte, error) {
	p, err := defaultSeccompProfile()
	if err != nil {
		return nil, err
	}
	allowed := false
	for _, s := range p.Syscalls {
		unconditional := s.Includes == nil || (len(s.Includes.Caps) == 0 && len(s.Includes.Arches) == 0 && s.Includes.MinKernel == nil)
		if s.Action == specs.ActAllow && len(s.Args) == 0 && unconditional && slices.Contains(s.Names, LandlockSyscalls[0]) {
			allowed = true
		}
	}
	if !allowed {
		p.Syscalls = append(p.Syscalls, &seccomp.Syscall{
			LinuxSyscall: specs.LinuxSyscall{Names: LandlockSyscalls, Action: specs.ActAllow},
			Comment:      "meepa host mode: Landlock for the per-message child",
		})
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("runner seccomp profile: %w", err)
	}
	return raw, nil
}

// MessageDenied are the syscalls every per-message container is refused
// (EPERM, the profile's default action) whatever the engine's own default
// profile allows: io_uring (Docker's default allowed it until Engine 25.0,
// and Debian 12's 20.10 still does; it is a large kernel surface no tool
// needs, and host mode refuses it too) and everything else host mode's
// filter refuses outright but setsid (landlock.DeniedSyscalls, which
// agent-run also installs on itself): tracing and reading other processes,
// keyrings, bpf, userfaultfd, namespaces, mounts, modules, clocks, NUMA
// policy.
func MessageDenied() []string {
	out := []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}
	for _, n := range landlock.DeniedSyscalls() {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// MessageSeccompProfile is the seccomp profile of every per-message
// container: Docker's default profile as the moby/profiles module has it
// (not the daemon's, which differs by engine version and distribution)
// with MessageDenied taken out of every rule that would allow them, under
// any capability, architecture or kernel condition. HardenedSpec passes it
// as "seccomp=<profile JSON>".
var MessageSeccompProfile = sync.OnceValues(func() ([]byte, error) {
	p, err := defaultSeccompProfile()
	if err != nil {
		return nil, err
	}
	denied := MessageDenied()
	kept := p.Syscalls[:0]
	for _, s := range p.Syscalls {
		if s.Action == specs.ActAllow {
			s.Names = slices.DeleteFunc(slices.Clone(s.Names), func(n string) bool { return slices.Contains(denied, n) })
			// Name is deprecated, but an old-style profile may still use it.
			if s.Name != "" && slices.Contains(denied, s.Name) { //nolint:staticcheck // SA1019: see above
				s.Name = "" //nolint:staticcheck // SA1019
			}
			if len(s.Names) == 0 && s.Name == "" { //nolint:staticcheck // SA1019
				continue
			}
		}
		kept = append(kept, s)
	}
	p.Syscalls = kept
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("message seccomp profile: %w", err)
	}
	return raw, nil
})
