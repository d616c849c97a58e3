package kubedeploy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// Observed is what Read found of an agent.
type Observed struct {
	// Missing names the kinds of the agent's objects that are gone
	// ("Secret", "Role", "PersistentVolumeClaim" ...).
	Missing []string
	// Changed names objects altered out of band (a Role with other rules).
	Changed []string
	// ConfigHash is the hash of the config in the Secret; "" when the
	// Secret is gone or unreadable.
	ConfigHash string
	// RunnerStatus is agentspec.StatusRunning, StatusNotReady, agentspec.StatusStale (the pod
	// runs another config) or agentspec.StatusMissing (no Deployment).
	RunnerStatus string
	RunnerPod    string
}

// Drift reports whether the next apply has something to restore.
func (o Observed) Drift() bool {
	return len(o.Missing) > 0 || len(o.Changed) > 0 || o.RunnerStatus != agentspec.StatusRunning
}

// Read observes an agent's objects as they are. a is the agent as last
// applied (its runner image enters the hash).
func (s *Service) Read(ctx context.Context, a Agent) (Observed, error) {
	var o Observed
	id, n, ns, cs := a.Config.AgentID, NamesFor(a.Config.AgentID), s.o.Client.Namespace, s.o.Client.Clientset
	cfg, key, err := s.secretState(ctx, n)
	if err != nil {
		return o, stepErr(agentspec.StepRead, "", "reading the runner's Secret", err)
	}
	if cfg == nil || key == nil {
		o.Missing = append(o.Missing, "Secret")
	} else {
		a.Config = *cfg
		o.ConfigHash = s.hash(a, key)
	}
	present := func(kind string, err error) error {
		if apierrors.IsNotFound(err) {
			o.Missing = append(o.Missing, kind)
			return nil
		}
		return err
	}
	sa, saErr := cs.CoreV1().ServiceAccounts(ns).Get(ctx, n.Base, metav1.GetOptions{})
	role, roleErr := cs.RbacV1().Roles(ns).Get(ctx, n.Base, metav1.GetOptions{})
	rb, rbErr := cs.RbacV1().RoleBindings(ns).Get(ctx, n.Base, metav1.GetOptions{})
	_, svcErr := cs.CoreV1().Services(ns).Get(ctx, n.Base, metav1.GetOptions{})
	_, pvcErr := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, n.Claim, metav1.GetOptions{})
	_, depErr := cs.AppsV1().Deployments(ns).Get(ctx, n.Base, metav1.GetOptions{})
	err = errors.Join(present("ServiceAccount", saErr), present("Role", roleErr), present("RoleBinding", rbErr),
		present("Service", svcErr), present("PersistentVolumeClaim", pvcErr), present("Deployment", depErr))
	if err != nil {
		return o, stepErr(agentspec.StepRead, "", "reading the runner's objects", err)
	}
	if saErr == nil && cfg != nil && !admissionIntact(sa.Annotations, cfg, ns) {
		// What the admission policy holds the runner's pods to was
		// edited: the next apply restores it.
		o.Changed = append(o.Changed, "ServiceAccount")
	}
	if err := s.readShared(ctx, &o); err != nil {
		return o, stepErr(agentspec.StepRead, "", "reading the namespace's policies and the runner admission policy", err)
	}
	if err := s.readMessagePolicy(ctx, &a.Config, &o); err != nil {
		return o, stepErr(agentspec.StepRead, "", "reading the message pods' policy", err)
	}
	if roleErr == nil && !reflect.DeepEqual(role.Rules, RunnerRules()) {
		o.Changed = append(o.Changed, "Role")
	}
	if rbErr == nil && !reflect.DeepEqual(rb.Subjects, RoleBinding(n, ns, id).Subjects) {
		o.Changed = append(o.Changed, "RoleBinding")
	}
	o.RunnerStatus = agentspec.StatusMissing
	if depErr == nil {
		if err := s.readRunner(ctx, id, o.ConfigHash, &o); err != nil {
			return o, stepErr(agentspec.StepRead, "", "reading the runner", err)
		}
	}
	return o, nil
}

// readRunner: running when the one pod of the Secret's hash is ready,
// stale when a pod runs another hash, else not ready.
func (s *Service) readRunner(ctx context.Context, id, hash string, o *Observed) error {
	pod, err := s.runnerState(ctx, id, hash)
	if pod != nil {
		o.RunnerStatus, o.RunnerPod = agentspec.StatusRunning, pod.Name
		return nil
	}
	o.RunnerStatus = StatusNotReady
	if apierrors.IsNotFound(err) {
		return nil
	}
	pods, lerr := s.runnerPods(ctx, id)
	if lerr != nil {
		return lerr
	}
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Annotations[AnnotationConfigHash] != hash {
			o.RunnerStatus, o.RunnerPod = agentspec.StatusStale, p.Name
		}
	}
	return nil
}

// removeWait bounds the wait for the runner pods to go.
const removeWait = 2 * time.Minute

// Remove takes an agent down: the Deployment first (its runner deletes its
// prestarted pod while its RBAC still exists), then any message pod left,
// the Service, the RBAC objects, the Secret and the agent's network
// policies. The workspace claim stays
// unless force is set. Objects already gone count as removed.
func (s *Service) Remove(ctx context.Context, id string, force bool) error {
	n, ns, cs := NamesFor(id), s.o.Client.Namespace, s.o.Client.Clientset
	bg := metav1.DeletePropagationBackground
	if err := ignoreNotFound(cs.AppsV1().Deployments(ns).Delete(ctx, n.Base, metav1.DeleteOptions{PropagationPolicy: &bg})); err != nil {
		return stepErr(StepRemoveKube, "", "deleting the Deployment "+n.Base, err)
	}
	if err := s.waitRunnerGone(ctx, id); err != nil {
		return stepErr(StepRemoveKube, "", "waiting for the runner of "+id+" to stop", err)
	}
	if _, err := kube.DeleteAgentPods(ctx, s.o.Client, id); err != nil {
		return stepErr(StepRemoveKube, "", "deleting the message pods of "+id, err)
	}
	opts := metav1.DeleteOptions{}
	err := errors.Join(
		ignoreNotFound(cs.CoreV1().Services(ns).Delete(ctx, n.Base, opts)),
		ignoreNotFound(cs.RbacV1().RoleBindings(ns).Delete(ctx, n.Base, opts)),
		ignoreNotFound(cs.RbacV1().Roles(ns).Delete(ctx, n.Base, opts)),
		ignoreNotFound(cs.CoreV1().ServiceAccounts(ns).Delete(ctx, n.Base, opts)),
		ignoreNotFound(cs.CoreV1().Secrets(ns).Delete(ctx, n.Base, opts)),
	)
	if err != nil {
		return stepErr(StepRemoveKube, "", "deleting the runner objects of "+id, err)
	}
	if err := s.removeLLMPolicy(ctx, id); err != nil {
		return err
	}
	if err := s.removeMessagePolicy(ctx, id); err != nil {
		return err
	}
	s.log.Info("runner objects removed", "agent_id", id, "name", n.Base)
	s.pruneAdmission(ctx)
	if !force {
		s.log.Info("keeping the agent's workspace claim", "agent_id", id, "claim", n.Claim)
		return nil
	}
	if err := ignoreNotFound(cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, n.Claim, opts)); err != nil {
		return stepErr(agentspec.StepRemoveWorkspace, "", "deleting the workspace claim "+n.Claim, err)
	}
	s.log.Info("workspace claim removed", "agent_id", id, "claim", n.Claim)
	return nil
}

func (s *Service) waitRunnerGone(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, removeWait)
	defer cancel()
	for {
		pods, err := s.runnerPods(ctx, id)
		if err != nil {
			return err
		}
		if len(pods) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d runner pods still there after %s", len(pods), removeWait)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Import restores an agent from its objects: the config from its Secret
// (with the token, the API key and the secrets; the caller decides what to
// keep), the runner image and pull policy from its Deployment, the
// workspace's class and volume from its claim.
func (s *Service) Import(ctx context.Context, id string) (Agent, error) {
	var a Agent
	if !workspace.ValidID(id) {
		return a, stepErr(agentspec.StepImport, "", "importing "+id, fmt.Errorf("%q is not an agent id (%s)", id, workspace.IDPattern))
	}
	n, ns, cs := NamesFor(id), s.o.Client.Namespace, s.o.Client.Clientset
	cfg, _, err := s.secretState(ctx, n)
	if err == nil && cfg == nil {
		err = fmt.Errorf("no readable runner config in Secret %s/%s", ns, n.Base)
	}
	if err != nil {
		return a, stepErr(agentspec.StepImport, "", "importing "+id, err)
	}
	a.Config = *cfg
	if sec, err := cs.CoreV1().Secrets(ns).Get(ctx, n.Base, metav1.GetOptions{}); err == nil {
		a.ForceDestroyWorkspace = sec.Annotations[AnnotationForceDestroy] == "true"
	}
	if cfg.Kubernetes != nil {
		a.ThreegateNetwork = cfg.Kubernetes.Topology
	}
	for _, t := range cfg.Ask {
		a.ThreegateAsk = append(a.ThreegateAsk, t.AgentID)
	}
	dep, err := cs.AppsV1().Deployments(ns).Get(ctx, n.Base, metav1.GetOptions{})
	switch {
	case err == nil && len(dep.Spec.Template.Spec.Containers) == 1:
		c := dep.Spec.Template.Spec.Containers[0]
		a.PullPolicy = c.ImagePullPolicy
		if c.Image != cfg.Container.Image {
			a.RunnerImage = c.Image
		}
	case err != nil && !apierrors.IsNotFound(err):
		return a, stepErr(agentspec.StepImport, "", "importing "+id, err)
	}
	pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, n.Claim, metav1.GetOptions{})
	if err == nil {
		a.Workspace = Workspace{StorageClass: pvc.Spec.StorageClassName, Volume: pvc.Spec.VolumeName}
		if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			a.Workspace.Size = q.String()
		}
	}
	return a, nil
}
