package kubedeploy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
)

// Backend is the agent lifecycle of agentspec.Backend on a cluster: the same
// agentspec.Agent the Docker service takes, mapped onto this package's
// objects. What a cluster cannot honour is refused by Check, which the
// provider's plan and Apply both call.
type Backend struct{ s *Service }

var _ agentspec.Backend = (*Backend)(nil)

// NewBackend returns the cluster backend over s.
func NewBackend(s *Service) *Backend { return &Backend{s: s} }

// Check lists what of a has no meaning on a cluster, or no counterpart
// yet, each an *fault.FieldError titled "Not On Kubernetes" (joined).
// It needs nothing but a, so a plan can run it; Apply refuses the same.
func (b *Backend) Check(a agentspec.Agent) ([]agentspec.Warning, error) {
	var ws []agentspec.Warning
	if b.s.o.SkipAdmission {
		ws = append(ws, agentspec.Warning{Topic: TopicAdmissionOff, Detail: "kubernetes.runner_admission_policy = false: no admission " +
			"policy narrows what this agent's runner may do, so a runner whose pod is taken over may create any pod of the namespace " +
			"that Pod Security admits (one that mounts another agent's Secret or workspace, or runs as another runner's " +
			"ServiceAccount) and attach to or delete any pod there. Keep one trust domain per namespace."})
	}
	return ws, Check(a)
}

// TopicAdmissionOff is the Warning Check gives when the provider ships no
// runner admission policy.
const TopicAdmissionOff = "runner admission off"

// CheckRuntime is agentspec.Backend's: a RuntimeClass that names the
// runtime's handler.
func (b *Backend) CheckRuntime(ctx context.Context, name string) error {
	_, err := b.s.RuntimeClass(ctx, name)
	return err
}

// Check is Backend.Check, for callers without a cluster.
func Check(a agentspec.Agent) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &fault.FieldError{Field: field, Index: -1, Summary: "Not On Kubernetes", Err: fmt.Errorf(format, args...)})
	}
	c := a.Config
	if a.Meta.Deployment == agentspec.ModeExternal {
		bad("runner.deployment", `on Kubernetes the runner is always a Deployment the provider manages; remove "external"`)
	}
	if c.Listen != "" {
		bad("runner.listen", "on Kubernetes the runner listens on port %d of its pod, reached through its Service; remove runner.listen", DefaultPort)
	}
	if !c.Container.Enabled {
		bad("container_mode.enabled", "on Kubernetes every message runs in a fresh Pod: there is no host mode (Landlock) in a cluster; set container_mode.enabled = true")
	}
	if c.FileAccess.Unrestricted || len(c.FileAccess.AllowRead) > 0 || len(c.FileAccess.AllowReadWrite) > 0 || len(c.FileAccess.Deny) > 0 {
		bad("file_access", "file_access governs host-mode agents, which a cluster does not run; remove it")
	}
	// soul, memory and manage_soul travel in the runner's config and are
	// applied by each message pod (agentOf); container_mode.network "none"
	// and "bridge" are a NetworkPolicy on the message pods (MessagePolicy).
	if n := c.Container.Network; a.Meta.ThreegateNetwork == "" && n != "" && n != "none" && n != "bridge" {
		bad("container_mode.network", "%q: a cluster has no Docker networks; use \"none\" or \"bridge\" (out to public addresses only), "+
			"or place the agent in a threegate topology", n)
	}
	if len(c.SecretBindings) > 0 && a.Meta.ThreegateRole != agentspec.RoleFetch {
		// The runner's own broker serves host mode and the managed bridge
		// on Docker; a cluster brokers through a topology's proxy only.
		bad("secret_bindings", "on Kubernetes a secret is brokered by a threegate topology's egress proxy, for a fetch agent only; "+
			"place the agent in a topology as its fetch agent, or remove secret_bindings")
	}
	return errors.Join(errs...)
}

// checkErr is Check's findings, each as a step error.
func checkErr(a agentspec.Agent) error {
	var errs []error
	for _, e := range unjoin(Check(a)) {
		var fe *fault.FieldError
		if errors.As(e, &fe) {
			errs = append(errs, &fault.StepError{Step: StepValidate, Field: fe.Field, What: "checking the agent for Kubernetes", Err: fe.Err})
		}
	}
	return errors.Join(errs...)
}

// CheckAsk is ResolveAsk for a plan: what the agents' Secrets show of the
// ask targets.
func (b *Backend) CheckAsk(ctx context.Context, topologyName string, ids []string) error {
	_, err := b.s.ResolveAsk(ctx, topologyName, ids)
	return err
}

// RunnerName names the agent's runner as a plan says it.
func (b *Backend) RunnerName(agentID string) string { return "the runner pod of agent " + agentID }

// unjoin lists the errors of an errors.Join, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// WorkspaceRef names an agent's workspace claim the way workspace_path
// shows it: pvc://<namespace>/<claim>.
func (b *Backend) WorkspaceRef(id string) string {
	return "pvc://" + b.s.o.Client.Namespace + "/" + NamesFor(id).Claim
}

// Plan derives the endpoint and workspace reference, and for an agent that
// has its token, the config hash Apply will give it (with the key its
// Secret holds; "" when that cannot be read: the plan then shows the hash
// as unknown).
func (b *Backend) Plan(ctx context.Context, a agentspec.Agent) agentspec.Planned {
	id := a.Config.AgentID
	p := agentspec.Planned{WorkspacePath: b.WorkspaceRef(id), Endpoint: b.s.Endpoint(id)}
	if a.Config.Token == "" || Check(a) != nil {
		return p
	}
	p.ConfigHash, _ = b.s.planHash(ctx, b.agentOf(a))
	return p
}

// agentOf maps the Docker-shaped agent onto a cluster agent. The
// workspace's soul and memory, which the provider writes itself on Docker,
// go into the runner's config as its seed: only the message pods mount
// the claim, so each applies it to /workspace before its loop.
func (b *Backend) agentOf(a agentspec.Agent) Agent {
	cfg := a.Config
	if a.Meta.ThreegateRole != "" {
		cfg.Role = a.Meta.ThreegateRole
	}
	k := agentspec.Kubernetes{}
	if cfg.Kubernetes != nil {
		k = *cfg.Kubernetes
	}
	k.Seed = &agentspec.Seed{Soul: a.Meta.Soul, Memory: a.Meta.Memory, ManageSoul: a.Meta.ManageSoul}
	cfg.Kubernetes = &k
	return Agent{
		Config:                cfg,
		RunnerImage:           a.Meta.RunnerImage,
		PullPolicy:            PullPolicyFor(cfg.Container.Image),
		ForceDestroyWorkspace: a.Meta.ForceDestroyWorkspace,
		ThreegateNetwork:      a.Meta.ThreegateNetwork,
		ThreegateAsk:          a.Meta.ThreegateAsk,
	}
}

// planHash is the hash Apply would give a, with the key in its Secret; ""
// for an agent whose Secret is gone (Apply makes a new key).
func (s *Service) planHash(ctx context.Context, a Agent) (string, error) {
	_, key, err := s.secretState(ctx, NamesFor(a.Config.AgentID))
	if err != nil || key == nil {
		return "", err
	}
	if err := s.complete(ctx, &a); err != nil {
		return "", err
	}
	return s.hash(a, key), nil
}

// PullPolicyFor is Always for an image in a registry (its tag may move to
// new content, as an isolation image's does with a new runner build) and
// IfNotPresent for one without a registry host, which only an operator
// can have put on the nodes.
func PullPolicyFor(ref string) corev1.PullPolicy {
	first, _, ok := strings.Cut(ref, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// Apply checks a for the cluster and applies it. prior and redeploy have no
// cluster meaning: the Deployment rolls exactly when its config hash moves.
func (b *Backend) Apply(ctx context.Context, a agentspec.Agent, _ *agentspec.Prior, _ bool) (agentspec.Applied, error) {
	out := agentspec.Applied{Token: a.Config.Token, Reported: agentspec.NotReported}
	if err := checkErr(a); err != nil {
		return out, err
	}
	got, err := b.s.Apply(ctx, b.agentOf(a))
	out.Token = got.Token
	if err != nil {
		return out, err
	}
	out.WorkspacePath = b.WorkspaceRef(a.Config.AgentID)
	out.Endpoint, out.ConfigHash = got.Endpoint, got.ConfigHash
	out.RunnerStatus, out.RunnerContainerID = got.RunnerStatus, got.RunnerPod
	if w := b.podSecurityWarning(ctx); w != "" {
		out.Warnings = append(out.Warnings, agentspec.Warning{Topic: TopicPodSecurity, Detail: w})
	}
	return out, nil
}

// Read maps the objects' state onto the Docker-shaped observation: a
// missing claim is a missing workspace, a missing object a runner to
// restore.
func (b *Backend) Read(ctx context.Context, a agentspec.Agent) (agentspec.Observed, error) {
	o, err := b.s.Read(ctx, b.agentOf(a))
	if err != nil {
		return agentspec.Observed{}, err
	}
	// SOUL.md is not read back: the provider does not mount the claim.
	// Docker's read-side drift of a managed soul has no counterpart here;
	// the seed in the config puts a managed soul back at the next
	// message instead. So the soul reads as configured.
	out := agentspec.Observed{
		WorkspacePath: b.WorkspaceRef(a.Config.AgentID), ConfigHash: o.ConfigHash,
		RunnerStatus: o.RunnerStatus, RunnerContainerID: o.RunnerPod,
		Soul: a.Meta.Soul, SoulPresent: true,
	}
	for _, kind := range o.Missing {
		if kind == "PersistentVolumeClaim" {
			out.WorkspacePath = ""
		}
	}
	if len(o.Missing) > 0 || len(o.Changed) > 0 {
		// The next apply puts every object back; a status other than
		// running makes the plan show it.
		if out.RunnerStatus == agentspec.StatusRunning {
			out.RunnerStatus = agentspec.StatusStale
		}
		out.Warnings = append(out.Warnings, agentspec.Warning{Topic: TopicObjectDrift,
			Detail: fmt.Sprintf("Agent %s on Kubernetes: missing %v, changed %v; the next apply restores them.", a.Config.AgentID, o.Missing, o.Changed)})
	}
	return out, nil
}

// TopicObjectDrift is the Warning a Read gives for an agent's objects
// deleted or changed out of band.
const TopicObjectDrift = "kubernetes object drift"

// Remove takes the agent down, keeping its claim unless forced.
func (b *Backend) Remove(ctx context.Context, a agentspec.Agent) error {
	return b.s.Remove(ctx, a.Config.AgentID, a.Meta.ForceDestroyWorkspace)
}

// Import reads an agent back from its Secret and objects.
func (b *Backend) Import(ctx context.Context, id string) (agentspec.Imported, error) {
	got, err := b.s.Import(ctx, id)
	if err != nil {
		return agentspec.Imported{Reported: agentspec.NotReported}, err
	}
	cfg := got.Config
	meta := agentspec.Meta{RunnerImage: got.RunnerImage, Deployment: agentspec.ModeContainer, ThreegateRole: cfg.Role,
		ThreegateNetwork: got.ThreegateNetwork, ThreegateAsk: got.ThreegateAsk, ForceDestroyWorkspace: got.ForceDestroyWorkspace}
	if k := cfg.Kubernetes; k != nil && k.Seed != nil {
		meta.Soul, meta.Memory, meta.ManageSoul = k.Seed.Soul, k.Seed.Memory, k.Seed.ManageSoul
	}
	cfg.Listen, cfg.Workspace, cfg.Kubernetes, cfg.Ask = "", b.WorkspaceRef(id), nil, nil
	return agentspec.Imported{Agent: agentspec.Agent{Config: cfg, Meta: meta}, Endpoint: b.s.Endpoint(id), Reported: agentspec.NotReported}, nil
}

// TopicPodSecurity is the Warning Apply gives when the namespace does not
// enforce the "restricted" Pod Security level.
const TopicPodSecurity = "pod security"

// podSecurityLabel is the namespace label the Pod Security admission
// enforces.
const podSecurityLabel = "pod-security.kubernetes.io/enforce"

// podSecurityWarning says what a namespace without restricted Pod Security
// leaves open: the runner's ServiceAccount may create pods, and without
// the admission a runner taken over could make one that is privileged or
// mounts the node. Every pod the provider makes passes "restricted" (the
// tests run under it); "" when the namespace enforces it.
func (b *Backend) podSecurityWarning(ctx context.Context) string {
	ns := b.s.o.Client.Namespace
	obj, err := b.s.o.Client.Clientset.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("Could not read namespace %s to check its Pod Security level (%v). Agents' runners may create pods; "+
			"label the namespace %s=restricted so that no pod they create can be privileged or mount the node.", ns, err, podSecurityLabel)
	}
	if obj.Labels[podSecurityLabel] == "restricted" {
		return ""
	}
	return fmt.Sprintf("Namespace %s does not enforce the restricted Pod Security level. Agents' runners may create pods there; "+
		"without it, a runner taken over could create one that is privileged or mounts the node. Every pod this provider makes "+
		"passes the level: label the namespace %s=restricted.", ns, podSecurityLabel)
}
