package kubedeploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// Apply makes the agent real and waits until its runner is available: the
// namespace's default-deny policies and the runner admission policy (both
// shared by every agent), the config Secret, the ServiceAccount (with what
// its message pods must be, for the admission policy) with its Role and
// RoleBinding, the
// workspace claim (made once, never changed), the network policies its
// pods need (the model endpoint's, the no-network one), the Deployment and
// the Service. A changed config changes the pod template's hash and so rolls
// the runner. A new agent whose runner does not come up is removed again
// (its Secret holds its secrets); its claim stays.
func (s *Service) Apply(ctx context.Context, a Agent) (Applied, error) {
	out := Applied{Token: a.Config.Token}
	if out.Token == "" {
		tok, err := agentspec.NewToken()
		if err != nil {
			return out, stepErr(agentspec.StepToken, "", "generating the runner's bearer token", err)
		}
		out.Token, a.Config.Token = tok, tok
	}
	if err := s.complete(ctx, &a); err != nil {
		return out, err
	}
	id, n := a.Config.AgentID, NamesFor(a.Config.AgentID)
	out.Endpoint, out.Claim = s.Endpoint(id), n.Claim
	prior, key, err := s.secretState(ctx, n)
	if err != nil {
		return out, stepErr(agentspec.StepRead, "", "reading the runner's Secret", err)
	}
	isNew := prior == nil
	if key == nil {
		if key, err = newKey(); err != nil {
			return out, stepErr(agentspec.StepFiles, "", "making the hash key", err)
		}
	}
	out.ConfigHash = s.hash(a, key)
	claim, err := s.workspaceClaim(a, n)
	if err != nil {
		return out, err
	}
	if err := s.ensureClaim(ctx, claim); err != nil {
		return out, err
	}
	ep, err := llmEndpoint(ctx, a)
	if err != nil {
		return out, s.rollback(ctx, id, isNew, err)
	}
	if err := s.applyLLMPolicy(ctx, a, ep); err != nil {
		return out, s.rollback(ctx, id, isNew, err)
	}
	if err := s.applyMessagePolicy(ctx, a); err != nil {
		return out, s.rollback(ctx, id, isNew, err)
	}
	if err := s.applyNamespacePolicies(ctx); err != nil {
		return out, s.rollback(ctx, id, isNew, err)
	}
	if err := s.applyAdmission(ctx); err != nil {
		return out, s.rollback(ctx, id, isNew, err)
	}
	if err := s.applyObjects(ctx, a, n, key, out.ConfigHash, ep); err != nil {
		return out, s.rollback(ctx, id, isNew, err)
	}
	pod, err := s.waitAvailable(ctx, id, out.ConfigHash)
	if err != nil {
		return out, s.rollback(ctx, id, isNew, stepErr(agentspec.StepHealth, "", "the runner of "+id+" did not become available", err))
	}
	out.RunnerStatus, out.RunnerPod = agentspec.StatusRunning, pod.Name
	s.log.Info("runner available", "agent_id", id, "pod", pod.Name, "config_hash", out.ConfigHash)
	if !agentspec.OwnPolicy(&a.Config) {
		// The runner of the new config runs: no pod of the old one is
		// left to need the policy.
		if err := s.removeMessagePolicy(ctx, id); err != nil {
			return out, err
		}
	}
	// The runner's ServiceAccount now carries this build's policy
	// version: the version it had before may be unused.
	s.pruneAdmission(ctx)
	return out, nil
}

func newKey() ([]byte, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return key, nil
}

// rollback removes a new agent whose runner failed, keeping its claim.
func (s *Service) rollback(ctx context.Context, id string, isNew bool, err error) error {
	if !isNew {
		return err
	}
	if rerr := s.Remove(context.WithoutCancel(ctx), id, false); rerr != nil {
		return errors.Join(err, rerr)
	}
	s.log.Info("failed runner removed", "agent_id", id)
	return err
}

// ensureClaim makes the workspace claim when it is missing; an existing
// claim is the agent's work and is left as it is.
func (s *Service) ensureClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	pvcs := s.o.Client.Clientset.CoreV1().PersistentVolumeClaims(s.o.Client.Namespace)
	_, err := pvcs.Create(ctx, pvc, metav1.CreateOptions{})
	switch {
	case err == nil:
		s.log.Info("workspace claim created", "claim", pvc.Name)
		return nil
	case apierrors.IsAlreadyExists(err):
		return nil
	}
	return stepErr(StepClaim, "", "making the workspace claim "+pvc.Name, err)
}

// applyObjects creates or updates every object but the claim. RBAC comes
// before the Deployment, so the runner's first calls are allowed.
func (s *Service) applyObjects(ctx context.Context, a Agent, n Names, key []byte, hash string, llm *kube.LLMEndpoint) error {
	ns, id, cs := s.o.Client.Namespace, a.Config.AgentID, s.o.Client.Clientset
	raw, err := json.MarshalIndent(a.Config, "", "  ")
	if err != nil {
		return stepErr(agentspec.StepConfig, "", "encoding the runner config", err)
	}
	rp := RunnerPod{
		AgentID: id, Image: a.runnerImage(), PullPolicy: a.PullPolicy, Port: s.o.Port, ConfigHash: hash,
		StopSeconds: int64(agentspec.StopTimeout(a.Config).Seconds()), APIServer: s.o.APIServer,
		Topology: a.ThreegateNetwork, Role: agentspec.ThreeGateRole(a.Config.Role),
	}
	if llm != nil {
		rp.HostAliases = kube.MemberHostAliases(llm.Host, llm.CIDRs)
	}
	dep, err := RunnerDeployment(n, ns, rp)
	if err != nil {
		return stepErr(agentspec.StepDeploy, "", "describing the runner Deployment", err)
	}
	sa, err := serviceAccount(n, ns, &a.Config)
	if err != nil {
		return stepErr(agentspec.StepDeploy, "", "describing the runner's message pods for its admission policy", err)
	}
	steps := []struct {
		kind string
		do   func() error
	}{
		{"Secret", func() error {
			sec := ConfigSecret(n, ns, id, raw, []byte(hex.EncodeToString(key)))
			if a.ForceDestroyWorkspace {
				sec.Annotations = map[string]string{AnnotationForceDestroy: "true"}
			}
			return upsert(ctx, cs.CoreV1().Secrets(ns), sec, nil)
		}},
		{"ServiceAccount", func() error { return upsert(ctx, cs.CoreV1().ServiceAccounts(ns), sa, nil) }},
		{"Role", func() error { return upsert(ctx, cs.RbacV1().Roles(ns), Role(n, ns, id), nil) }},
		{"RoleBinding", func() error { return upsert(ctx, cs.RbacV1().RoleBindings(ns), RoleBinding(n, ns, id), nil) }},
		{"Deployment", func() error { return upsert(ctx, cs.AppsV1().Deployments(ns), dep, nil) }},
		{"Service", func() error {
			return upsert(ctx, cs.CoreV1().Services(ns), RunnerService(n, ns, id, s.o.Port), keepClusterIP)
		}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			return stepErr(StepObjects, "", fmt.Sprintf("applying the %s %s/%s", st.kind, ns, n.Base), err)
		}
		s.log.Debug("runner object applied", "agent_id", id, "kind", st.kind, "name", n.Base)
	}
	return nil
}

// keepClusterIP carries the allocated address into an update.
func keepClusterIP(live, want *corev1.Service) {
	want.Spec.ClusterIP, want.Spec.ClusterIPs = live.Spec.ClusterIP, live.Spec.ClusterIPs
}

// objects is the part of a typed client upsert needs.
type objects[T metav1.Object] interface {
	Get(ctx context.Context, name string, o metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, o metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, o metav1.UpdateOptions) (T, error)
}

// upsert creates want, or replaces the live object's content with it;
// keep copies what the server owns from the live object.
func upsert[T metav1.Object](ctx context.Context, c objects[T], want T, keep func(live, want T)) error {
	live, err := c.Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Create(ctx, want, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	want.SetResourceVersion(live.GetResourceVersion())
	if keep != nil {
		keep(live, want)
	}
	_, err = c.Update(ctx, want, metav1.UpdateOptions{})
	return err
}
