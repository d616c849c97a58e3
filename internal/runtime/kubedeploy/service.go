// Package kubedeploy runs an agent's `agent-runner serve` on Kubernetes:
// the twin of package deploy, with a Deployment instead of a runner
// container and a Secret instead of a config file. The runner drives a
// fresh Pod per message itself (agentspec.Config.Kubernetes, kube.Pods).
// Exactly one runner exists per agent: one replica, and the Recreate
// strategy removes the old pod before a new one starts.
package kubedeploy

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/logging"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// DefaultReadyTimeout bounds the wait for a runner to become available.
const DefaultReadyTimeout = 2 * time.Minute

// DefaultWorkspaceSize is the workspace claim's request.
const DefaultWorkspaceSize = "1Gi"

// ModeKubernetes is the deployment mode in the config hash.
const ModeKubernetes = "kubernetes"

// Steps of a lifecycle (see fault.StepError), beyond deploy's.
const (
	StepValidate   = "validate"
	StepObjects    = "runner objects"
	StepClaim      = "workspace claim"
	StepRemoveKube = "runner objects remove"
)

// Options configure a Service. Zero values: DefaultPort, DefaultReadyTimeout,
// no logging, the cluster's own API server address for the runner.
type Options struct {
	// Client reaches the namespace the agents live in.
	Client *kube.Client
	// Version of the program that deploys: part of the config hash.
	Version      string
	Port         int32
	ReadyTimeout time.Duration
	// APIServer is "host:port" of the API server as pods reach it, for a
	// cluster whose kubernetes Service has no data plane (the project's
	// test cluster runs no kube-proxy).
	APIServer string
	// SkipAdmission ships no runner admission policy (AdmissionPolicy):
	// for a cluster without the API, at the operator's word. Runners may
	// then create any pod of their namespace that Pod Security admits.
	SkipAdmission bool
	Logger        logging.Logger
}

// Service runs the lifecycle of agents on Kubernetes: apply, read, remove.
type Service struct {
	o   Options
	log logging.Logger
}

// NewService returns the agent service for o.
func NewService(o Options) *Service {
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	return &Service{o: o, log: logging.Or(o.Logger)}
}

// Workspace says how the workspace claim is made. The zero value asks the
// cluster's default StorageClass for DefaultWorkspaceSize.
type Workspace struct {
	Size string
	// StorageClass nil is the default class; with Volume, "" binds the
	// claim to that PersistentVolume made in advance.
	StorageClass *string
	Volume       string
}

// Agent is one agent as its owner describes it.
type Agent struct {
	// Config is the runner's config. Token is empty for a new agent (Apply
	// makes one); Listen, Workspace, Ask and Kubernetes' namespace, claim
	// and topology are the service's. Kubernetes' other fields (cpu limit,
	// runtime class, sub-path) are the owner's.
	Config agentspec.Config
	// RunnerImage runs `agent-runner serve`; empty is the message image.
	RunnerImage string
	// PullPolicy of the runner and message images; empty is IfNotPresent.
	PullPolicy corev1.PullPolicy
	Workspace  Workspace
	// ForceDestroyWorkspace lets Remove delete the workspace claim.
	ForceDestroyWorkspace bool
	// ThreegateNetwork is the ThreeGate topology of an agent with a
	// Config.Role: its runner and message pods carry the topology's
	// labels (Config.Kubernetes.Topology). ThreegateAsk are the agents a
	// core agent may ask; Apply resolves them into Config.Ask (ResolveAsk).
	ThreegateNetwork string
	ThreegateAsk     []string
}

func (a Agent) runnerImage() string {
	if a.RunnerImage != "" {
		return a.RunnerImage
	}
	return a.Config.Container.Image
}

// Names are the agent's object names.
func (s *Service) Names(agentID string) Names { return NamesFor(agentID) }

// Endpoint is where a client inside the cluster reaches an agent's runner.
func (s *Service) Endpoint(agentID string) string {
	return fmt.Sprintf("http://%s.%s.svc:%d", NamesFor(agentID).Base, s.o.Client.Namespace, s.o.Port)
}

// Runner statuses Apply and Read report.
const (
	StatusNotReady = "not ready"
)

// Applied is an agent as Apply left it.
type Applied struct {
	Token        string
	ConfigHash   string
	Endpoint     string
	RunnerStatus string
	// RunnerPod is the name of the available runner pod.
	RunnerPod string
	Claim     string
}

func stepErr(step, field, what string, err error) error {
	return &fault.StepError{Step: step, Field: field, What: what, Err: err}
}

// complete fills what the service decides and checks the config as the
// runner will at its start, so a config the runner would refuse is never
// deployed.
func (s *Service) complete(ctx context.Context, a *Agent) error {
	c := &a.Config
	n := NamesFor(c.AgentID)
	k := agentspec.Kubernetes{}
	if c.Kubernetes != nil {
		k = *c.Kubernetes
	}
	k.Namespace, k.WorkspaceClaim = s.o.Client.Namespace, n.Claim
	if k.ImagePullPolicy == "" {
		k.ImagePullPolicy = string(a.PullPolicy)
	}
	if k.RuntimeClass == "" && c.Container.Runtime != "" && c.Container.Runtime != agentspec.DefaultRuntime {
		rc, err := s.RuntimeClass(ctx, c.Container.Runtime)
		if err != nil {
			return stepErr(agentspec.StepRuntime, "container_mode.runtime", "finding the RuntimeClass", err)
		}
		k.RuntimeClass = rc
	}
	k.Topology = a.ThreegateNetwork
	c.Kubernetes = &k
	c.Listen = fmt.Sprintf("0.0.0.0:%d", s.o.Port)
	c.Ask = nil
	if len(a.ThreegateAsk) > 0 {
		targets, err := agentspec.WaitForAsk(ctx, agentspec.AskWait, func() ([]agentspec.AskTarget, error) {
			return s.ResolveAsk(ctx, a.ThreegateNetwork, a.ThreegateAsk)
		})
		if err != nil {
			return stepErr(agentspec.StepAsk, "threegate.ask", "resolving the agents to ask", err)
		}
		c.Ask = targets
	}
	if a.ThreegateNetwork != "" {
		// A FETCH runner mints each message's egress credential with its
		// agent's key, derived from the topology's key Secret, which the
		// runner itself cannot read.
		eg, err := agentspec.EgressFor(c, func() (agentspec.EgressTopology, error) {
			return s.egressTopology(ctx, a.ThreegateNetwork)
		})
		if err != nil {
			return stepErr(agentspec.StepThreegate, "threegate", "preparing the agent's egress identity", err)
		}
		c.Egress = eg
	}
	c.Workspace = sandbox.WorkspaceDir
	if !workspace.ValidID(c.AgentID) {
		return stepErr(StepValidate, "agent_id", "checking the agent id", fmt.Errorf("%q is not an agent id (%s)", c.AgentID, workspace.IDPattern))
	}
	if err := kube.ValidateConfig(c); err != nil {
		return stepErr(StepValidate, "", "checking the runner config", err)
	}
	return nil
}

// RuntimeClass finds the RuntimeClass for an OCI runtime: the one of that
// name, else the one whose handler it is. The plan asks it too.
func (s *Service) RuntimeClass(ctx context.Context, runtime string) (string, error) {
	list, err := s.o.Client.Clientset.NodeV1().RuntimeClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("%w: list RuntimeClasses: %w", agentspec.ErrBackendUnreachable, err)
	}
	for _, rc := range list.Items {
		if rc.Name == runtime {
			return rc.Name, nil
		}
	}
	for _, rc := range list.Items {
		if rc.Handler == runtime {
			return rc.Name, nil
		}
	}
	have := make([]string, 0, len(list.Items))
	for _, rc := range list.Items {
		have = append(have, rc.Name+" (handler "+rc.Handler+")")
	}
	slices.Sort(have)
	if len(have) == 0 {
		have = append(have, "none")
	}
	return "", fmt.Errorf("the cluster has no RuntimeClass named %q or with that handler (it has: %s); install the runtime on the nodes and add a RuntimeClass, or use runc",
		runtime, strings.Join(have, ", "))
}

// secretState reads the agent's Secret: its config and hash key, or
// nothing when it is gone.
func (s *Service) secretState(ctx context.Context, n Names) (*agentspec.Config, []byte, error) {
	sec, err := s.o.Client.Clientset.CoreV1().Secrets(s.o.Client.Namespace).Get(ctx, n.Base, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("secret %s: %w", n.Base, err)
	}
	key, err := hex.DecodeString(string(sec.Data[SecretHashKey]))
	if err != nil || len(key) < 16 {
		key = nil
	}
	cfg, err := agentspec.ParseConfig(sec.Data[SecretConfigKey])
	if err != nil {
		return nil, key, nil
	}
	return cfg, key, nil
}

// hash is the config hash the runner's pod template carries.
func (s *Service) hash(a Agent, key []byte) string {
	return agentspec.ConfigHash(a.Config, agentspec.DeploySettings{Mode: ModeKubernetes, Image: a.runnerImage(), Version: s.o.Version}, key)
}

func (s *Service) workspaceClaim(a Agent, n Names) (*corev1.PersistentVolumeClaim, error) {
	size := a.Workspace.Size
	if size == "" {
		size = DefaultWorkspaceSize
	}
	q, err := resource.ParseQuantity(size)
	if err != nil || q.Sign() <= 0 {
		return nil, stepErr(StepClaim, "workspace.size", "the workspace size", fmt.Errorf("%q is not a size such as 1Gi", size))
	}
	return WorkspaceClaim(n, s.o.Client.Namespace, a.Config.AgentID, q, a.Workspace.StorageClass, a.Workspace.Volume), nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// egressTopology reads what a FETCH agent's egress block is made of from
// the cluster: the topology's record and key Secret, and its ready proxy
// pod's URL.
func (s *Service) egressTopology(ctx context.Context, name string) (agentspec.EgressTopology, error) {
	spec, err := kube.LiveTopology(ctx, s.o.Client, name)
	if err != nil {
		return agentspec.EgressTopology{}, err
	}
	key, err := kube.EgressKey(ctx, s.o.Client, name)
	if err != nil {
		return agentspec.EgressTopology{}, err
	}
	env, err := kube.ProxyEnv(ctx, s.o.Client, name)
	if err != nil {
		return agentspec.EgressTopology{}, err
	}
	return agentspec.EgressTopology{Allow: spec.Proxy.Allow, AllowPrivate: spec.Docker.AllowPrivate, Key: key, Proxy: env["http_proxy"]}, nil
}
