package agentspec

import (
	"syscall"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"

	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Config is the per-agent service's configuration, the file given to
// `agent-runner serve --config`. It holds secrets, so it is written with
// mode 0600 outside the agent's workspace. The provider's meepa_agent
// resource writes it; an operator running the service under systemd
// (deployment "external") uses the same file.
type Config struct {
	// AgentID names the agent; it is part of container names and labels.
	AgentID string `json:"agent_id"`
	// Workspace is the workspace's path on the Docker host (the bind-mount
	// source for per-message containers).
	Workspace string `json:"workspace"`
	// Listen is "unix:///path/to.sock" or "127.0.0.1:PORT".
	Listen string `json:"listen"`
	// Token is the bearer token that POST /v1/messages requires.
	Token string `json:"token"`
	// QueueSize bounds the waiting messages; past it the service answers 429.
	// Zero means 16.
	QueueSize int `json:"queue_size,omitempty"`
	// MaxRequestBytes bounds a message request's body; zero means 1 MiB.
	MaxRequestBytes int64 `json:"max_request_bytes,omitempty"`

	Container ContainerMode `json:"container_mode"`
	// FileAccess is the file_access block, enforced with Landlock when
	// container mode is off: the Landlock compiler's own type, so the two
	// can never drift apart.
	FileAccess landlock.FileAccess `json:"file_access"`
	LLM        LLMConfig           `json:"llm"`
	// Secrets are extra secret values. The runner keeps them: a bound one
	// (SecretBindings) is added by the egress proxy on its way to a bound
	// host, and none ever enters a sandbox; all are redacted from replies.
	Secrets map[string]string `json:"secrets,omitempty"`
	// SecretBindings bind secrets, by name, to the hosts they may be sent
	// to (see secrets.go).
	SecretBindings map[string]SecretBinding `json:"secret_bindings,omitempty"`
	// EgressUpstreamCA is PEM of extra CAs that the runner's own broker
	// (BrokerRunner) trusts for bound hosts, beside the system's roots.
	EgressUpstreamCA string `json:"egress_upstream_ca,omitempty"`
	// Flags from the spec's image_config, applied per agent.
	InjectCredentialsEnv bool `json:"inject_credentials_env"`
	InjectSecretsEnv     bool `json:"inject_secrets_env"`
	RedactSecrets        bool `json:"redact_secrets"`
	// Env is extra environment for the agent loop (e.g. a ThreeGate role's
	// http_proxy / https_proxy / no_proxy). It is set on the per-message
	// container, where `docker inspect` shows it, so it must hold no secret.
	Env map[string]string `json:"env,omitempty"`
	// MaxSteps bounds the agent loop's LLM/tool steps; zero means
	// DefaultMaxSteps.
	MaxSteps int `json:"max_steps,omitempty"`
	// LLMLimits bound what the relay forwards and what the agent may spend.
	LLMLimits LLMLimits `json:"llm_limits"`
	// Role is the agent's ThreeGate role ("core", "fetch", "tool_exec"; see
	// agent.RoleTools), empty for an agent outside a topology. The runner
	// hands it to the loop, which offers only the role's tools; a
	// "tool_exec" agent's sandbox has no network at all (its LLM calls
	// use the relay).
	Role string `json:"role,omitempty"`
	// Ask are the agents a CORE agent may ask (its topology's FETCH and
	// TOOL-EXEC agents): the runner routes an ask from the loop, through
	// the relay, to the target's runner (its socket on Docker, its pod on
	// a cluster), never over a network path from the sandbox.
	Ask []AskTarget `json:"ask,omitempty"`
	// Egress, for a FETCH agent of a topology whose proxy requires them,
	// mints the per-message egress credentials (see Egress).
	Egress *Egress `json:"egress,omitempty"`
	// AskTimeoutSeconds bounds one ask; zero means 120, and never more
	// than the asking message's own timeout.
	AskTimeoutSeconds int `json:"ask_timeout_seconds,omitempty"`
	// RelayDir holds the LLM relay's unix socket, mounted read-only into
	// every per-message container; it must be at the same path on the
	// Docker host. Empty: see RelayDir(cfg).
	RelayDir string `json:"relay_dir,omitempty"`
	// DockerHost is the daemon the per-message containers run on; empty
	// means DOCKER_HOST, else the local socket.
	DockerHost string `json:"docker_host,omitempty"`
	// Journal is the directory (made 0700) where the runner records every
	// message it accepts until it is answered, so that a restart resumes
	// them (see the package doc). It holds message text: keep it outside
	// the workspace, away from every sandbox. Empty: no journal, and a
	// restart forgets what was queued.
	Journal string `json:"journal_dir,omitempty"`
	// Kubernetes, when set, runs each message in a Pod of the cluster the
	// runner itself runs in, instead of a Docker container (see
	// Kubernetes).
	Kubernetes *Kubernetes `json:"kubernetes,omitempty"`

	// Path is the absolute path LoadConfig read the config from; it is
	// not part of the file.
	Path string `json:"-"`
}

// ContainerMode is the spec's container_mode block plus the hardening knobs.
type ContainerMode struct {
	Enabled bool `json:"enabled"`
	// Image is the isolation image the per-message containers run.
	Image string `json:"image"`
	// MemoryLimit is a size such as "512m" (unset: DefaultMemoryBytes);
	// swap equals memory.
	MemoryLimit    Size `json:"memory_limit"`
	TimeoutSeconds int  `json:"timeout_seconds"`
	// Network is "none", "bridge", or empty when Networks is set. Empty
	// without Networks means "none" (fail closed); the provider writes the
	// spec's default ("bridge") explicitly.
	Network string `json:"network,omitempty"`
	// Networks are named networks to join (a ThreeGate role's networks);
	// the first is attached at create, the rest before start.
	Networks []string `json:"networks,omitempty"`
	// DNS is the only upstream the engine's resolver forwards to, for the
	// runner and its per-message containers on Networks (a ThreeGate
	// topology's DNS sink: names outside the topology go nowhere).
	DNS []Addr `json:"dns,omitempty"`
	// PidsLimit bounds processes and threads; zero means DefaultPidsLimit.
	PidsLimit int64 `json:"pids_limit"`
	// User is "uid:gid" or "uid" for the agent loop; unset means the
	// agent's own uid (AgentUser; on a cluster DefaultUser). Root is
	// refused when the file is read, nobody, named, by ValidateSettings
	// (UserFor). The runner chowns the workspace to it at start when it
	// sees the workspace at this path and runs as root; otherwise the
	// workspace must already be writable by this user.
	User UserSpec `json:"user,omitzero"`
	// Runtime is the OCI runtime ("runc", "crun", "runsc"); empty: daemon default.
	Runtime string `json:"runtime,omitempty"`
	// Prestart keeps the next container started and waiting on stdin. On
	// when the field is absent from the file (LoadConfig sees to that).
	Prestart bool `json:"prestart"`
}

// AskTarget is one agent a CORE agent may ask, and how its runner is
// reached, with its token. On Docker, Listen as that runner's config says
// ("unix:///path", mounted at the same path into this runner, or
// "127.0.0.1:PORT"). On a cluster (Config.Kubernetes), Port: the runner
// finds the target's ready runner pod in its namespace through the API
// (kube.RunnerSelector) and calls its pod IP on that port; no Service is
// involved, so a cluster without kube-proxy works the same.
type AskTarget struct {
	AgentID string `json:"agent_id"`
	Role    string `json:"role"`
	Listen  string `json:"listen,omitempty"`
	Port    int    `json:"port,omitempty"`
	Token   string `json:"token"`
}

// Timeout is the per-message limit.
func (c ContainerMode) Timeout() time.Duration {
	if c.TimeoutSeconds <= 0 {
		return DefaultTimeout
	}
	return time.Duration(c.TimeoutSeconds) * time.Second
}

// LoadConfig reads a config file and refuses one that others can read. The
// mode is checked on the open file, so a swap after the check is not read.
func LoadConfig(path string) (*Config, error) { return loadConfig(path, false) }

// LoadSecretConfig reads a config mounted from a Kubernetes Secret. The
// kubelet makes such a file readable by the pod's fsGroup, so group read is
// accepted when that group is this process's own; a file others can read,
// or anyone but its owner can write, is refused as by LoadConfig.
func LoadSecretConfig(path string) (*Config, error) { return loadConfig(path, true) }

func loadConfig(path string, groupRead bool) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("runner config: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("runner config: %w", err)
	}
	if err := checkConfigMode(path, st, groupRead); err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("runner config: %w", err)
	}
	c, err := ParseConfig(raw)
	if err != nil {
		return nil, err
	}
	if c.Path, err = filepath.Abs(path); err != nil {
		return nil, fmt.Errorf("runner config: %w", err)
	}
	return c, nil
}

// ParseConfig decodes a config and applies the defaults that a zero value
// cannot express (prestart is on unless the file says "prestart": false).
// The typed values (sizes, the user) are parsed here, once; a bad one is a
// *fault.FieldError naming its setting ("container_mode.memory_limit").
func ParseConfig(raw []byte) (*Config, error) {
	var c Config
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("runner config: %w", fieldOfDecode(err))
	}
	var present struct {
		Container struct {
			Prestart *bool `json:"prestart"`
		} `json:"container_mode"`
	}
	_ = json.Unmarshal(raw, &present)
	if present.Container.Prestart == nil {
		c.Container.Prestart = true
	}
	return &c, nil
}

// WriteConfig writes c to path with mode 0600, replacing any old file
// atomically. The temporary file is new (O_EXCL, random name): a fixed name
// that already existed would keep its own, possibly wider, mode, or lead the
// secrets through a symlink.
func WriteConfig(path string, c *Config) (err error) {
	raw, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("runner config: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("runner config: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreNotExist(os.Remove(f.Name())))
		}
	}()
	// CreateTemp makes 0600 already; the chmod says so against any umask.
	if err := f.Chmod(0o600); err != nil {
		return errors.Join(fmt.Errorf("runner config: %w", err), f.Close())
	}
	if _, err := f.Write(raw); err != nil {
		return errors.Join(fmt.Errorf("runner config: %w", err), f.Close())
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("runner config: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("runner config: %w", err)
	}
	return nil
}

// checkConfigMode refuses a config file that others than its owner (and,
// with groupRead, its own group) can read, or anyone but its owner can
// write.
func checkConfigMode(path string, st fs.FileInfo, groupRead bool) error {
	perm := st.Mode().Perm()
	if !groupRead || perm&0o037 != 0 {
		if perm&0o077 == 0 {
			return nil
		}
		return fmt.Errorf("runner config %s: mode %o lets others read its secrets; chmod 600 it", path, perm)
	}
	if perm&0o040 != 0 && !ownGroup(st) {
		return fmt.Errorf("runner config %s: mode %o lets a group other than this process's own read its secrets", path, perm)
	}
	return nil
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Kubernetes is the config section of a runner that runs inside a cluster:
// each message gets a fresh hardened Pod (kube.Pods) in Namespace, made
// with the runner's own service account. container_mode gives the image,
// memory limit, user, timeout and prestart as for Docker.
type Kubernetes struct {
	// Namespace of the per-message pods; empty is the runner pod's own.
	Namespace string `json:"namespace,omitempty"`
	// WorkspaceClaim is the PersistentVolumeClaim each message pod mounts
	// at /workspace; WorkspaceSubPath a directory inside it.
	WorkspaceClaim   string `json:"workspace_claim"`
	WorkspaceSubPath string `json:"workspace_sub_path,omitempty"`
	// ImagePullPolicy of container_mode.image: Always, IfNotPresent
	// (default) or Never (an image imported into the nodes).
	ImagePullPolicy string `json:"image_pull_policy,omitempty"`
	// CPULimit is a quantity ("500m", "2"); default kube.DefaultCPULimit.
	CPULimit string `json:"cpu_limit,omitempty"`
	// RuntimeClass is the pods' runtimeClassName, container_mode.runtime's
	// counterpart; empty is the cluster's default runtime.
	RuntimeClass string `json:"runtime_class,omitempty"`
	// Topology is the ThreeGate topology (threegate_network) of an agent
	// with a Role: its message pods carry the topology's and the role's
	// labels, which the topology's NetworkPolicies select. Set exactly
	// when Role is.
	Topology string `json:"threegate_topology,omitempty"`
	// Seed is the workspace's soul and memory: on a cluster nothing but
	// the message pods mounts the claim, so the runner sends the seed
	// with every message and agent-run applies it (Seed). Nil
	// leaves the workspace to the agent. Part of the config, so a new
	// soul changes the config hash and rolls the runner.
	Seed *Seed `json:"workspace_seed,omitempty"`
}

// OwnPolicy reports whether an agent's message pods are governed by a
// policy of the agent's own (kubedeploy.MessagePolicy): an agent without a
// ThreeGate role, whose network is "none" (or empty, which means "none") or
// "bridge". A role's pods are governed by its topology's policies.
func OwnPolicy(c *Config) bool {
	n := c.Container.Network
	return c.Role == "" && len(c.Container.Networks) == 0 && (n == "" || n == "none" || n == "bridge")
}

// ownGroup reports whether a file's group is this process's effective
// group.
func ownGroup(st fs.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Gid) == os.Getegid()
}
