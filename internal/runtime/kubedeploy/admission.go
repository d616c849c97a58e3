package kubedeploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// A runner's Role lets it create, delete and attach to pods of its
// namespace, which RBAC cannot narrow to the runner's own message pods: a
// pod is enough to read another agent's Secret, run as another runner's
// ServiceAccount, write into another agent's claim, take a label that
// another role's NetworkPolicies allow, or attach to another agent's pod.
// The API server narrows it with one ValidatingAdmissionPolicy
// (AdmissionPolicy) and its binding, shipped by the provider: no webhook to
// run, nothing a runner can reach.
//
// The policy's parameters are the runners' own ServiceAccounts: each
// carries, in annotations the runner cannot change (it may not touch
// ServiceAccounts), what its agent's message pods are (Admission). The
// binding selects every runner ServiceAccount of the request's namespace;
// the API server evaluates the policy once per ServiceAccount, and an
// evaluation applies only when the request comes from that ServiceAccount
// (request.userInfo.username). A runner's token authenticates only while
// its ServiceAccount exists, so no runner acts without its parameters.
// On CONNECT pods/attach the API server gives the pod's name, not the pod:
// message pods are named kube.MessagePodPrefix (the runner's name and
// ".msg-"), which no other agent's pod name starts with.

// The policy and its binding are cluster-scoped and shared by every agent
// of every namespace that runs the same policy. A release (or a branch)
// whose pods need other rules must not overwrite the rules older runners
// still need, or be refused by them: each policy is named and labelled by
// a hash of its own content (AdmissionVersion), its binding takes as
// parameters only the runner ServiceAccounts labelled with that version,
// and every runner's ServiceAccount carries the version its pods were made
// for. Versions coexist; one no ServiceAccount of the cluster uses any
// more is removed (pruneAdmission).
const (
	// AdmissionPolicyPrefix starts every policy's and binding's name; the
	// version follows.
	AdmissionPolicyPrefix = "meepa-runner-pods"
	// LabelAdmission is the version label of policies, bindings and runner
	// ServiceAccounts.
	LabelAdmission = engine.LabelPrefix + "admission"
	// legacyAdmission is the single unversioned policy (and binding) of
	// earlier releases, which took every runner ServiceAccount as a
	// parameter.
	legacyAdmission = AdmissionPolicyPrefix
)

// admissionVersion is AdmissionVersion, computed once.
var admissionVersion = sync.OnceValue(func() string {
	raw, err := json.Marshal(admissionSpec())
	if err != nil {
		panic("kubedeploy: encoding the admission policy: " + err.Error())
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:5])
})

// AdmissionVersion is the hash of the policy this build ships.
func AdmissionVersion() string { return admissionVersion() }

// AdmissionPolicyName is the name of this build's policy and binding.
func AdmissionPolicyName() string { return AdmissionPolicyPrefix + "-" + AdmissionVersion() }

// admissionLabels are the labels of this build's policy and binding.
func admissionLabels() map[string]string {
	return engine.Labels(kube.ComponentRunner, map[string]string{"admission": AdmissionVersion()})
}

// Annotations on a runner's ServiceAccount: what its message pods must be.
const (
	annoPrefix      = engine.LabelPrefix + "pod-"
	AnnoPodAgent    = annoPrefix + "agent"
	AnnoPodImage    = annoPrefix + "image"
	AnnoPodClaim    = annoPrefix + "claim"
	AnnoPodTopology = annoPrefix + "threegate"
	AnnoPodRole     = annoPrefix + "threegate-role"
	AnnoPodRoleFlag = annoPrefix + "role-flag"
	AnnoPodRuntime  = annoPrefix + "runtime-class"
	AnnoPodMemory   = annoPrefix + "memory"
	AnnoPodCPU      = annoPrefix + "cpu"
)

// Admission is what the policy holds an agent's message pods to, taken
// from the pod kube.HardenedPod makes for its config (the runner makes its
// pods with the same function).
type Admission struct {
	AgentID, Image, Claim, Topology, Role, RoleFlag, RuntimeClass, Memory, CPU string
}

// AdmissionFor derives Admission from the runner config.
func AdmissionFor(c *agentspec.Config, ns string) (Admission, error) {
	if c.Kubernetes == nil {
		return Admission{}, fmt.Errorf("the config has no kubernetes section")
	}
	spec := kube.OptionsFor(c, nil).Spec
	pod, err := kube.HardenedPod(spec, ns, "")
	if err != nil {
		return Admission{}, err
	}
	ctr := pod.Spec.Containers[0]
	a := Admission{
		AgentID: c.AgentID, Image: ctr.Image, Claim: spec.WorkspaceClaim,
		Topology: spec.Topology, Role: spec.Role, RoleFlag: kube.RoleFlag(spec.Role),
		Memory: ctr.Resources.Limits.Memory().String(), CPU: ctr.Resources.Limits.Cpu().String(),
	}
	if pod.Spec.RuntimeClassName != nil {
		a.RuntimeClass = *pod.Spec.RuntimeClassName
	}
	return a, nil
}

// Annotations are a's ServiceAccount annotations.
func (a Admission) Annotations() map[string]string {
	return map[string]string{
		AnnoPodAgent: a.AgentID, AnnoPodImage: a.Image, AnnoPodClaim: a.Claim,
		AnnoPodTopology: a.Topology, AnnoPodRole: a.Role, AnnoPodRoleFlag: a.RoleFlag,
		AnnoPodRuntime: a.RuntimeClass, AnnoPodMemory: a.Memory, AnnoPodCPU: a.CPU,
	}
}

// lit is a CEL string literal of a constant of this program.
func lit(s string) string {
	if strings.ContainsAny(s, `'\`+"\n") {
		panic("kubedeploy: no CEL literal for " + s)
	}
	return "'" + s + "'"
}

func list(items ...string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = lit(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// want reads one of the parameter's annotations.
func want(key string) string { return "params.metadata.annotations[" + lit(key) + "]" }

// rule is one validation: expr must hold for a request it applies to.
type rule struct{ expr, msg string }

// AdmissionPolicy is this build's policy for every runner whose
// ServiceAccount carries its version.
func AdmissionPolicy() *admv1.ValidatingAdmissionPolicy {
	return &admv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionPolicyName(), Labels: admissionLabels()},
		Spec:       admissionSpec(),
	}
}

// admissionSpec is what the policy checks; its hash is the version.
func admissionSpec() admv1.ValidatingAdmissionPolicySpec {
	fail := admv1.Fail
	labelKeys := list(engine.LabelManagedBy, engine.LabelComponent, sandbox.LabelAgent, sandbox.LabelMessage, sandbox.LabelInstance,
		kube.ThreeGateLabelTopology, kube.ThreeGateLabelRole, kube.ThreeGateLabelExecution)
	has := func(k, v string) string {
		return "(" + lit(k) + " in variables.labels && variables.labels[" + lit(k) + "] == " + v + ")"
	}
	hasNot := func(k string) string { return "!(" + lit(k) + " in variables.labels)" }
	sc := "variables.ctr.securityContext"
	// Each applies to a CREATE by the parameter's runner.
	create := []rule{
		{"object.metadata.name.startsWith(variables.prefix)", "a runner's pod is named after it: the name must start with its name and " + kube.MessagePodInfix},
		{"variables.labels.all(k, k in " + labelKeys + ")", "a runner's pod carries its agent's message-pod labels and no others"},
		{has(engine.LabelManagedBy, lit(engine.ManagedByValue)) + " && " + has(engine.LabelComponent, lit(sandbox.Component)) + " && " +
			has(sandbox.LabelAgent, want(AnnoPodAgent)), "a runner's pod is a message pod of its own agent"},
		{want(AnnoPodTopology) + " == '' ? (" + hasNot(kube.ThreeGateLabelTopology) + " && " + hasNot(kube.ThreeGateLabelRole) + " && " +
			hasNot(kube.ThreeGateLabelExecution) + ") : (" + has(kube.ThreeGateLabelTopology, want(AnnoPodTopology)) + " && " +
			has(kube.ThreeGateLabelRole, want(AnnoPodRole)) + " && " + has(kube.ThreeGateLabelExecution, "'true'") + ")",
			"a runner's pod carries its agent's topology and role, as an execution pod"},
		{"has(object.spec.automountServiceAccountToken) && object.spec.automountServiceAccountToken == false",
			"a runner's pod sets automountServiceAccountToken: false"},
		{"(!has(object.spec.serviceAccountName) || object.spec.serviceAccountName == 'default') && " +
			"(!has(object.spec.serviceAccount) || object.spec.serviceAccount == 'default')",
			"a runner's pod runs as no ServiceAccount but the namespace's default"},
		{"!has(object.spec.volumes) || object.spec.volumes.all(v, has(v.emptyDir) || " +
			"(has(v.persistentVolumeClaim) && v.persistentVolumeClaim.claimName == " + want(AnnoPodClaim) + "))",
			"a runner's pod mounts its agent's workspace claim and memory scratch space only: no Secret, projected token, other claim or host path"},
		{"(!has(object.spec.hostNetwork) || !object.spec.hostNetwork) && (!has(object.spec.hostPID) || !object.spec.hostPID) && " +
			"(!has(object.spec.hostIPC) || !object.spec.hostIPC)", "a runner's pod shares nothing with the node"},
		{"(!has(object.spec.initContainers) || size(object.spec.initContainers) == 0) && " +
			"(!has(object.spec.ephemeralContainers) || size(object.spec.ephemeralContainers) == 0) && size(object.spec.containers) == 1",
			"a runner's pod has one container"},
		{want(AnnoPodRuntime) + " == '' ? !has(object.spec.runtimeClassName) : " +
			"(has(object.spec.runtimeClassName) && object.spec.runtimeClassName == " + want(AnnoPodRuntime) + ")",
			"a runner's pod runs under its agent's runtime class"},
		{want(AnnoPodTopology) + " == '' || (has(object.spec.dnsPolicy) && object.spec.dnsPolicy == 'None' && has(object.spec.dnsConfig) && " +
			"has(object.spec.dnsConfig.nameservers) && object.spec.dnsConfig.nameservers == " + list(kube.MemberDNSSink) + ")",
			"a topology member's pod has no resolver"},
		{"has(object.spec.securityContext) && has(object.spec.securityContext.runAsNonRoot) && object.spec.securityContext.runAsNonRoot && " +
			"has(object.spec.securityContext.seccompProfile) && object.spec.securityContext.seccompProfile.type == 'RuntimeDefault'",
			"a runner's pod runs as non-root under the RuntimeDefault seccomp profile"},
		{"variables.ctr.image == " + want(AnnoPodImage), "a runner's pod runs its agent's image"},
		{"has(variables.ctr.command) && size(variables.ctr.command) > 2 && variables.ctr.command[0] == " + lit(sandbox.DefaultCommand[0]) +
			" && variables.ctr.command[1] == " + lit(sandbox.DefaultCommand[1]) + " && " + want(AnnoPodRoleFlag) + " in variables.ctr.command && " +
			"variables.ctr.command.all(a, a in " + list(sandbox.DefaultCommand[0], sandbox.DefaultCommand[1], "--frames") + " || a == " + want(AnnoPodRoleFlag) +
			" || a.startsWith('--await-blocked=') || a.startsWith('--await-open=')) && (!has(variables.ctr.args) || size(variables.ctr.args) == 0)",
			"a runner's pod runs agent-run with its agent's role"},
		{"(!has(variables.ctr.envFrom) || size(variables.ctr.envFrom) == 0) && (!has(variables.ctr.env) || variables.ctr.env.all(e, !has(e.valueFrom)))",
			"a runner's pod takes no environment from Secrets, ConfigMaps or the API"},
		{"has(" + sc + ") && has(" + sc + ".allowPrivilegeEscalation) && !" + sc + ".allowPrivilegeEscalation && " +
			"has(" + sc + ".readOnlyRootFilesystem) && " + sc + ".readOnlyRootFilesystem && (!has(" + sc + ".privileged) || !" + sc + ".privileged) && " +
			"has(" + sc + ".capabilities) && has(" + sc + ".capabilities.drop) && " + sc + ".capabilities.drop == ['ALL'] && " +
			"(!has(" + sc + ".capabilities.add) || size(" + sc + ".capabilities.add) == 0) && " +
			"(!has(" + sc + ".seccompProfile) || " + sc + ".seccompProfile.type == 'RuntimeDefault') && " +
			"(!has(" + sc + ".procMount) || " + sc + ".procMount == 'Default') && (!has(" + sc + ".runAsNonRoot) || " + sc + ".runAsNonRoot)",
			"a runner's pod has the hardened security context: no privilege escalation, read-only root, every capability dropped"},
		{"has(variables.ctr.resources) && has(variables.ctr.resources.limits) && 'memory' in variables.ctr.resources.limits && " +
			"'cpu' in variables.ctr.resources.limits && " +
			"quantity(variables.ctr.resources.limits['memory']).compareTo(quantity(" + want(AnnoPodMemory) + ")) <= 0 && " +
			"quantity(variables.ctr.resources.limits['cpu']).compareTo(quantity(" + want(AnnoPodCPU) + ")) <= 0",
			"a runner's pod has its agent's memory and CPU limits"},
		{"(!has(variables.ctr.volumeDevices) || size(variables.ctr.volumeDevices) == 0) && " +
			"(!has(variables.ctr.ports) || variables.ctr.ports.all(p, !has(p.hostPort) || p.hostPort == 0))",
			"a runner's pod has no devices or host ports"},
	}
	var vals []admv1.Validation
	add := func(expr, msg string) {
		vals = append(vals, admv1.Validation{Expression: expr, Message: msg, Reason: ptr(metav1.StatusReasonForbidden)})
	}
	add("!variables.mine || (variables.sub == '' && request.operation in ['CREATE', 'DELETE']) || "+
		"(variables.sub == 'attach' && request.operation == 'CONNECT')",
		"a runner may create and delete its message pods and attach to them, nothing else")
	add("!variables.mine || request.operation == 'CREATE' || request.name.startsWith(variables.prefix)",
		"a runner may delete and attach to its own agent's message pods only (named after the runner)")
	add("!variables.mine || request.operation != 'DELETE' || (has(oldObject.metadata.labels) && "+
		lit(sandbox.LabelAgent)+" in oldObject.metadata.labels && oldObject.metadata.labels["+lit(sandbox.LabelAgent)+"] == "+want(AnnoPodAgent)+" && "+
		lit(engine.LabelComponent)+" in oldObject.metadata.labels && oldObject.metadata.labels["+lit(engine.LabelComponent)+"] == "+lit(sandbox.Component)+")",
		"a runner may delete its own agent's message pods only: never a runner or the proxy")
	for _, r := range create {
		add("!variables.creating || ("+r.expr+")", r.msg)
	}
	return admv1.ValidatingAdmissionPolicySpec{
		ParamKind: &admv1.ParamKind{APIVersion: "v1", Kind: "ServiceAccount"},
		MatchConstraints: &admv1.MatchResources{
			ResourceRules: []admv1.NamedRuleWithOperations{{RuleWithOperations: admv1.RuleWithOperations{
				Operations: []admv1.OperationType{admv1.OperationAll},
				Rule:       admv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods", "pods/*"}, Scope: ptr(admv1.NamespacedScope)},
			}}},
		},
		// The CEL runtime or a parameter without its annotations
		// fails: the request is refused.
		FailurePolicy: &fail,
		Variables: []admv1.Variable{
			{Name: "mine", Expression: "request.userInfo.username == 'system:serviceaccount:' + params.metadata.namespace + ':' + params.metadata.name"},
			// An empty subresource is absent, not "".
			{Name: "sub", Expression: "has(request.subResource) ? request.subResource : ''"},
			{Name: "prefix", Expression: "params.metadata.name + " + lit(kube.MessagePodInfix)},
			{Name: "creating", Expression: "variables.mine && request.operation == 'CREATE' && variables.sub == ''"},
			{Name: "labels", Expression: "has(object.metadata.labels) ? object.metadata.labels : {}"},
			{Name: "ctr", Expression: "object.spec.containers[0]"},
		},
		Validations: vals,
	}
}

// AdmissionBinding applies the policy in every namespace, with the
// runners' ServiceAccounts of its version in the request's namespace as
// parameters; a namespace without such runners has none, and nothing to
// refuse.
func AdmissionBinding() *admv1.ValidatingAdmissionPolicyBinding {
	allow := admv1.AllowAction
	return &admv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionPolicyName(), Labels: admissionLabels()},
		Spec: admv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: AdmissionPolicyName(),
			ParamRef: &admv1.ParamRef{
				Selector:                &metav1.LabelSelector{MatchLabels: admissionLabels()},
				ParameterNotFoundAction: &allow,
			},
			ValidationActions: []admv1.ValidationAction{admv1.Deny},
		},
	}
}

// HasAdmissionAPI reports whether the cluster serves
// admissionregistration.k8s.io/v1 ValidatingAdmissionPolicies (Kubernetes
// 1.30 and later).
func HasAdmissionAPI(ctx context.Context, c *kube.Client) (bool, error) {
	res, err := c.Clientset.Discovery().ServerResourcesForGroupVersion(admv1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%w: asking the API server for %s: %w", agentspec.ErrBackendUnreachable, admv1.SchemeGroupVersion, err)
	}
	for _, r := range res.APIResources {
		if r.Name == "validatingadmissionpolicies" {
			return true, nil
		}
	}
	return false, ctx.Err()
}

// CheckAdmission says whether Apply can ship the runner admission policy:
// nil when it can (or Options.SkipAdmission says not to), ErrNoAdmissionAPI
// for a cluster without the API, an error wrapping
// agentspec.ErrBackendUnreachable when it could not ask. The plan runs it;
// Apply refuses the same.
func (b *Backend) CheckAdmission(ctx context.Context) error {
	if b.s.o.SkipAdmission {
		return nil
	}
	ok, err := HasAdmissionAPI(ctx, b.s.o.Client)
	if err != nil {
		return err
	}
	if !ok {
		return ErrNoAdmissionAPI
	}
	return nil
}

// ErrNoAdmissionAPI is the reason a cluster without the API is refused.
var ErrNoAdmissionAPI = fmt.Errorf("the cluster serves no %s ValidatingAdmissionPolicy (Kubernetes 1.30 or later): without it "+
	"nothing stops a runner whose pod is taken over from creating any pod in its namespace (one that mounts another agent's "+
	"Secret or runs as another runner's ServiceAccount) and attaching to or deleting any pod there", admv1.SchemeGroupVersion)

// applyAdmission makes (or restores) this build's policy and its binding;
// both are shared by every agent of the version and stay until the last
// of them is removed.
func (s *Service) applyAdmission(ctx context.Context) error {
	if s.o.SkipAdmission {
		return nil
	}
	ok, err := HasAdmissionAPI(ctx, s.o.Client)
	if err != nil {
		return stepErr(StepObjects, "", "checking the cluster's admission API", err)
	}
	if !ok {
		return stepErr(StepObjects, "", "the runner admission policy", ErrNoAdmissionAPI)
	}
	adm := s.o.Client.Clientset.AdmissionregistrationV1()
	if err := upsert(ctx, adm.ValidatingAdmissionPolicies(), AdmissionPolicy(), nil); err != nil {
		return stepErr(StepObjects, "", "applying ValidatingAdmissionPolicy "+AdmissionPolicyName(), err)
	}
	if err := upsert(ctx, adm.ValidatingAdmissionPolicyBindings(), AdmissionBinding(), nil); err != nil {
		return stepErr(StepObjects, "", "applying ValidatingAdmissionPolicyBinding "+AdmissionPolicyName(), err)
	}
	s.log.Debug("runner admission policy applied", "policy", AdmissionPolicyName())
	return nil
}

// serviceAccount is the runner's ServiceAccount with its pods' Admission.
func serviceAccount(n Names, ns string, c *agentspec.Config) (*corev1.ServiceAccount, error) {
	sa := ServiceAccount(n, ns, c.AgentID)
	adm, err := AdmissionFor(c, ns)
	if err != nil {
		return nil, err
	}
	sa.Annotations = adm.Annotations()
	return sa, nil
}

// admissionIntact reports whether a ServiceAccount's annotations still
// say what the config's message pods are.
func admissionIntact(have map[string]string, c *agentspec.Config, ns string) bool {
	want, err := AdmissionFor(c, ns)
	if err != nil {
		return false
	}
	for k, v := range want.Annotations() {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// readShared adds to o.Missing the objects every agent shares that are
// gone: the namespace's two NetworkPolicies and, unless skipped, the
// admission policy and its binding (each apply restores them).
func (s *Service) readShared(ctx context.Context, o *Observed) error {
	cs := s.o.Client.Clientset
	missing := func(kind string, err error) error {
		if apierrors.IsNotFound(err) {
			o.Missing = append(o.Missing, kind)
			return nil
		}
		return err
	}
	nps := cs.NetworkingV1().NetworkPolicies(s.o.Client.Namespace)
	_, e1 := nps.Get(ctx, DefaultDenyPolicyName, metav1.GetOptions{})
	_, e2 := nps.Get(ctx, OpenRunnerPolicyName, metav1.GetOptions{})
	errs := []error{missing("NetworkPolicy "+DefaultDenyPolicyName, e1), missing("NetworkPolicy "+OpenRunnerPolicyName, e2)}
	if !s.o.SkipAdmission {
		_, e3 := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, AdmissionPolicyName(), metav1.GetOptions{})
		_, e4 := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, AdmissionPolicyName(), metav1.GetOptions{})
		errs = append(errs, missing("ValidatingAdmissionPolicy", e3), missing("ValidatingAdmissionPolicyBinding", e4))
	}
	return errors.Join(errs...)
}

// admissionGrace is how old an unused policy version must be before it is
// pruned: an apply makes the policy before its runner's ServiceAccount, so
// a version another apply has just made is not taken for unused.
var admissionGrace = 10 * time.Minute

// pruneAdmission removes the policy versions (and their bindings) no
// runner ServiceAccount of any namespace carries, older than
// admissionGrace, and the unversioned policy of earlier releases once no
// runner ServiceAccount is without a version. It only tidies: a cluster
// whose ServiceAccounts it may not list keeps every version, and nothing
// fails because of it.
func (s *Service) pruneAdmission(ctx context.Context) {
	if s.o.SkipAdmission {
		return
	}
	cs := s.o.Client.Clientset
	runners := labels.SelectorFromSet(engine.Labels(kube.ComponentRunner, nil)).String()
	sas, err := cs.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{LabelSelector: runners})
	if err != nil {
		s.log.Debug("not pruning admission policies: listing runner ServiceAccounts", "error", err)
		return
	}
	inUse := map[string]bool{}
	for _, sa := range sas.Items {
		inUse[sa.Labels[LabelAdmission]] = true // "" for a runner of an earlier release
	}
	adm := cs.AdmissionregistrationV1()
	pols, err := adm.ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{LabelSelector: runners})
	if err != nil {
		s.log.Debug("not pruning admission policies: listing them", "error", err)
		return
	}
	for _, p := range pols.Items {
		v, versioned := p.Labels[LabelAdmission]
		switch {
		case !versioned && p.Name != legacyAdmission, inUse[v], versioned && time.Since(p.CreationTimestamp.Time) < admissionGrace:
			continue
		}
		err := errors.Join(ignoreNotFound(adm.ValidatingAdmissionPolicyBindings().Delete(ctx, p.Name, metav1.DeleteOptions{})),
			ignoreNotFound(adm.ValidatingAdmissionPolicies().Delete(ctx, p.Name, metav1.DeleteOptions{})))
		if err != nil {
			s.log.Debug("pruning admission policy", "policy", p.Name, "error", err)
			continue
		}
		s.log.Info("unused runner admission policy removed", "policy", p.Name)
	}
}
