package kubetopology

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubedeploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/logging"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// DefaultReadyTimeout bounds Apply's wait for the proxy, and Teardown's
// wait for its pod to go.
const DefaultReadyTimeout = 2 * time.Minute

// Options configure a Service. The zero value: no logging, runners on
// kubedeploy.DefaultPort, the proxy image pulled if not present,
// DefaultReadyTimeout, DefaultProbeSettle.
type Options struct {
	Logger logging.Logger
	// RunnerPort is where the agents' runner pods serve their API.
	RunnerPort int
	// PullPolicy of the proxy image.
	PullPolicy corev1.PullPolicy
	// ReadyTimeout bounds the waits.
	ReadyTimeout time.Duration
	// ProbeSettle is how long Verify's probe pods wait before their
	// checks (0: DefaultProbeSettle); negative runs the checks at once,
	// with no shell needed in the probe image.
	ProbeSettle time.Duration
}

// Service brings ThreeGate topologies up and down in one namespace of a
// cluster. On the way up the policies come first and the proxy last, so
// no proxy pod runs before its rules; on the way down the proxy goes first
// and the policies last, and a topology with members left is not torn
// down at all: without its policies they would run unconfined. Every
// object it creates, changes or removes is logged.
type Service struct {
	c   *kube.Client
	o   Options
	log logging.Logger
}

// NewService returns the service for c's namespace.
func NewService(c *kube.Client, o Options) *Service {
	if o.RunnerPort == 0 {
		o.RunnerPort = kubedeploy.DefaultPort
	}
	if o.PullPolicy == "" {
		o.PullPolicy = corev1.PullIfNotPresent
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	return &Service{c: c, o: o, log: logging.Or(o.Logger)}
}

// Status is what the cluster shows of a topology.
type Status struct {
	// Policies are the names of the topology's live NetworkPolicies
	// (the agents' LLM policies excluded).
	Policies []string
	// ProxyDeployment and ProxyService are set when those objects exist.
	ProxyDeployment bool
	ProxyService    bool
	// ProxyReady is set when a proxy pod of the current configuration runs.
	ProxyReady bool
	// ProxyPodIP is the ready proxy pod's address.
	ProxyPodIP netip.Addr
	// ProxyURL is what FETCH execution pods set as http_proxy and
	// https_proxy: the proxy pod's address, not the Service's. A ClusterIP
	// works only where a Service data plane (kube-proxy or its like)
	// translates it, and the project's test cluster has none; the pod
	// address works on every cluster, and the FETCH policy admits the
	// proxy pods by label whichever address is dialled. The price: the
	// address changes when the pod is replaced, so a runner reads it
	// afresh (Read) for each execution pod it makes.
	ProxyURL string
	// ServiceURL is the proxy by its Service's ClusterIP, for clusters
	// with a Service data plane; empty without the Service.
	ServiceURL string
	// Drift lists, in words, how the cluster differs from the spec; empty
	// means in sync.
	Drift []string
}

// Gone reports whether nothing of the topology is left.
func (st Status) Gone() bool {
	return len(st.Policies) == 0 && !st.ProxyDeployment && !st.ProxyService
}

// wanted is the whole set of objects of a spec.
type wanted struct {
	policies   []netv1.NetworkPolicy
	deployment *appsv1.Deployment
	service    *corev1.Service
}

// desired validates s and builds its objects for this cluster; keyID is
// KeyID of the topology's egress key ("" when it has none yet).
func (sv *Service) desired(ctx context.Context, s topospec.Spec, keyID string) (wanted, error) {
	if ps := Check(s); len(ps) > 0 {
		return wanted{}, fmt.Errorf("topology %q: %w", s.Name, ps[0])
	}
	cluster, err := kube.DiscoverCluster(ctx, sv.c)
	if err != nil {
		return wanted{}, err
	}
	pols, err := kube.ThreeGatePolicies(kube.PolicyInput{
		Name: s.Name, Namespace: sv.c.Namespace, RunnerPort: sv.o.RunnerPort,
		ProxyPort: s.Proxy.Port, ProxyDNS: s.Proxy.DNS, Cluster: cluster,
	})
	if err != nil {
		return wanted{}, fmt.Errorf("topology %q cannot be enforced on this cluster: %w", s.Name, err)
	}
	d, err := ProxyDeployment(s, sv.c.Namespace, sv.o.PullPolicy, keyID)
	if err != nil {
		return wanted{}, err
	}
	return wanted{pols, d, ProxyService(s, sv.c.Namespace)}, nil
}

// Apply brings the cluster to s and reads it back: the policies, then the
// proxy's Deployment and Service, then it waits for the proxy to listen.
// Only what differs is changed. A Status with Drift means the cluster
// still differs after apply.
func (sv *Service) Apply(ctx context.Context, s topospec.Spec) (Status, error) {
	if ps := Check(s); len(ps) > 0 {
		return Status{}, fmt.Errorf("topology %q: %w", s.Name, ps[0])
	}
	key, err := sv.ensureKey(ctx, s.Name)
	if err != nil {
		return Status{}, err
	}
	w, err := sv.desired(ctx, s, KeyID(key))
	if err != nil {
		return Status{}, err
	}
	sv.log.Debug("applying threegate topology", "topology", s.Name, "namespace", sv.c.Namespace, "allow_entries", len(s.Proxy.Allow))
	for i := range w.policies {
		if err := sv.ensurePolicy(ctx, s.Name, &w.policies[i]); err != nil {
			return Status{}, err
		}
	}
	if err := sv.removeStalePolicies(ctx, s.Name, w.policies); err != nil {
		return Status{}, err
	}
	if err := sv.ensureDeployment(ctx, s.Name, w.deployment); err != nil {
		return Status{}, err
	}
	if err := sv.ensureService(ctx, s.Name, w.service); err != nil {
		return Status{}, err
	}
	pod, err := sv.waitProxy(ctx, s)
	if err != nil {
		return Status{}, fmt.Errorf("proxy of topology %q: %w", s.Name, err)
	}
	sv.log.Info("threegate proxy ready", "topology", s.Name, "pod", pod.Name, "ip", pod.Status.PodIP)
	return sv.status(ctx, s, w)
}

// Read observes the topology's objects and lists their drift.
func (sv *Service) Read(ctx context.Context, s topospec.Spec) (Status, error) {
	keyID, keyDrift := "", ""
	switch key, err := kube.EgressKey(ctx, sv.c, s.Name); {
	case err == nil:
		keyID = KeyID(key)
	case ctx.Err() != nil:
		return Status{}, ctx.Err()
	default:
		keyDrift = err.Error()
	}
	w, err := sv.desired(ctx, s, keyID)
	if err != nil {
		return Status{}, err
	}
	st, err := sv.status(ctx, s, w)
	if err == nil && keyDrift != "" && !st.Gone() {
		st.Drift = append(st.Drift, keyDrift)
	}
	switch {
	case err != nil:
	case st.Gone():
		sv.log.Info("threegate topology not found on the cluster", "topology", s.Name, "namespace", sv.c.Namespace)
	case len(st.Drift) > 0:
		sv.log.Warn("threegate drift", "topology", s.Name, "drift", st.Drift)
	}
	return st, err
}

// ownedSelector selects the objects of topology name, agent policies too.
func ownedSelector(name string) string {
	return labels.SelectorFromSet(kube.ThreeGateObjectLabels(name)).String()
}

// topologyPolicies lists the topology's own policies: those of the
// agents (ThreeGateLabelAgent) belong to the agents.
func (sv *Service) topologyPolicies(ctx context.Context, name string) ([]netv1.NetworkPolicy, error) {
	req, err := labels.NewRequirement(kube.ThreeGateLabelAgent, selection.DoesNotExist, nil)
	if err != nil {
		return nil, err
	}
	sel := labels.SelectorFromSet(kube.ThreeGateObjectLabels(name)).Add(*req)
	list, err := sv.c.Clientset.NetworkingV1().NetworkPolicies(sv.c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list network policies: %w", err)
	}
	return list.Items, nil
}

func (sv *Service) ensurePolicy(ctx context.Context, name string, want *netv1.NetworkPolicy) error {
	api := sv.c.Clientset.NetworkingV1().NetworkPolicies(sv.c.Namespace)
	live, err := api.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := api.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create network policy %s: %w", want.Name, err)
		}
		sv.log.Info("network policy created", "topology", name, "policy", want.Name)
		return nil
	case err != nil:
		return fmt.Errorf("get network policy %s: %w", want.Name, err)
	}
	if d := policyDrift(want, live); d != "" {
		live.Spec = want.Spec
		live.Labels = mergeLabels(live.Labels, want.Labels)
		if _, err := api.Update(ctx, live, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update network policy %s: %w", want.Name, err)
		}
		sv.log.Info("network policy changed", "topology", name, "policy", want.Name, "was", d)
	}
	return nil
}

// policyDrift says how live differs from want, or "".
func policyDrift(want, live *netv1.NetworkPolicy) string {
	for k, v := range want.Labels {
		if live.Labels[k] != v {
			return fmt.Sprintf("network policy %s lost its label %s=%s", want.Name, k, v)
		}
	}
	if !equality.Semantic.DeepEqual(want.Spec, live.Spec) {
		return fmt.Sprintf("network policy %s differs from the configuration (edited out of band, or the cluster's addresses changed)", want.Name)
	}
	return ""
}

// removeStalePolicies removes the topology's policies that want no longer
// has (from an earlier version of the set).
func (sv *Service) removeStalePolicies(ctx context.Context, name string, want []netv1.NetworkPolicy) error {
	live, err := sv.topologyPolicies(ctx, name)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, p := range want {
		keep[p.Name] = true
	}
	for _, p := range live {
		if !keep[p.Name] {
			if err := sv.deletePolicy(ctx, name, p.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

func (sv *Service) deletePolicy(ctx context.Context, name, policy string) error {
	err := sv.c.Clientset.NetworkingV1().NetworkPolicies(sv.c.Namespace).Delete(ctx, policy, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete network policy %s: %w", policy, err)
	}
	sv.log.Info("network policy removed", "topology", name, "policy", policy)
	return nil
}

// ensureKey returns the topology's egress key, making its key Secret
// when there is none. The key is never changed: the FETCH agents' keys
// are derived from it.
func (sv *Service) ensureKey(ctx context.Context, name string) ([]byte, error) {
	api := sv.c.Clientset.CoreV1().Secrets(sv.c.Namespace)
	sn := kube.EgressKeySecretName(name)
	live, err := api.Get(ctx, sn, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		key, err := proxy.NewKey()
		if err != nil {
			return nil, err
		}
		if _, err := api.Create(ctx, kube.EgressKeySecret(name, sv.c.Namespace, key), metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create egress key secret %s: %w", sn, err)
		}
		sv.log.Info("egress key secret created", "topology", name, "secret", sn, "key_id", KeyID(key))
		return key, nil
	case err != nil:
		return nil, fmt.Errorf("get egress key secret %s: %w", sn, err)
	}
	if err := owned(live.Labels, name, "secret "+sn); err != nil {
		return nil, err
	}
	return kube.EgressKey(ctx, sv.c, name)
}

func (sv *Service) ensureDeployment(ctx context.Context, name string, want *appsv1.Deployment) error {
	api := sv.c.Clientset.AppsV1().Deployments(sv.c.Namespace)
	live, err := api.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := api.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create proxy deployment %s: %w", want.Name, err)
		}
		sv.log.Info("proxy deployment created", "topology", name, "deployment", want.Name, "config", want.Spec.Template.Annotations[AnnotationConfig])
		return nil
	case err != nil:
		return fmt.Errorf("get proxy deployment %s: %w", want.Name, err)
	}
	if err := owned(live.Labels, name, "deployment "+want.Name); err != nil {
		return err
	}
	if d := deploymentDrift(want, live); len(d) > 0 {
		live.Spec = want.Spec
		live.Labels = mergeLabels(live.Labels, want.Labels)
		live.Annotations = mergeLabels(live.Annotations, want.Annotations)
		if _, err := api.Update(ctx, live, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update proxy deployment %s: %w", want.Name, err)
		}
		sv.log.Info("proxy deployment changed", "topology", name, "deployment", want.Name, "was", d)
	}
	return nil
}

// deploymentDrift says how the live proxy Deployment differs from want.
func deploymentDrift(want, live *appsv1.Deployment) []string {
	var out []string
	n := want.Name
	switch rec, ok := live.Annotations[AnnotationSpec]; {
	case !ok:
		out = append(out, fmt.Sprintf("proxy deployment %s carries no record of its topology (made by an earlier release); the next apply writes it", n))
	case rec != want.Annotations[AnnotationSpec]:
		out = append(out, fmt.Sprintf("proxy deployment %s records another configuration than this one", n))
	}
	if live.Spec.Replicas == nil || *live.Spec.Replicas != 1 {
		out = append(out, fmt.Sprintf("proxy deployment %s does not run exactly one replica", n))
	}
	for k, v := range want.Spec.Template.Labels {
		if live.Spec.Template.Labels[k] != v {
			out = append(out, fmt.Sprintf("proxy pods of %s lost the label %s=%s (the policies would not govern them)", n, k, v))
		}
	}
	wc, lc := want.Spec.Template.Spec.Containers[0], container(live)
	if lc == nil {
		return append(out, fmt.Sprintf("proxy deployment %s has no %s container", n, proxyContainer))
	}
	switch {
	case !equality.Semantic.DeepEqual(wc.Env, lc.Env):
		out = append(out, fmt.Sprintf("proxy deployment %s has no egress key (made by an earlier release, or edited): its requests carry no "+
			"per-message identity; the next apply replaces its pod with one that requires a credential per message", n))
	case live.Spec.Template.Annotations[AnnotationKeyID] != want.Spec.Template.Annotations[AnnotationKeyID]:
		out = append(out, fmt.Sprintf("proxy pod of %s runs with another egress key than the topology's key Secret holds", n))
	}
	if lc.Image != wc.Image {
		out = append(out, fmt.Sprintf("proxy image is %s, want %s", lc.Image, wc.Image))
	}
	if la, wa := topospec.ReadLegacyArgs(lc.Args).Allow, topospec.ReadLegacyArgs(wc.Args).Allow; strings.Join(la, ",") != strings.Join(wa, ",") {
		out = append(out, fmt.Sprintf("proxy allow list is [%s], want [%s]", strings.Join(la, ", "), strings.Join(wa, ", ")))
	} else if strings.Join(append(lc.Command, lc.Args...), " ") != strings.Join(append(wc.Command, wc.Args...), " ") {
		out = append(out, fmt.Sprintf("proxy command is %q, want %q", append(lc.Command, lc.Args...), append(wc.Command, wc.Args...)))
	}
	wp, lp := want.Spec.Template.Spec, live.Spec.Template.Spec
	if !equality.Semantic.DeepEqual(wc.SecurityContext, lc.SecurityContext) || !equality.Semantic.DeepEqual(wp.SecurityContext, lp.SecurityContext) ||
		!equality.Semantic.DeepEqual(wp.AutomountServiceAccountToken, lp.AutomountServiceAccountToken) ||
		!equality.Semantic.DeepEqual(wc.Resources, lc.Resources) || len(lp.Volumes) > 0 || len(lp.Containers) != 1 || len(lp.InitContainers) > 0 {
		out = append(out, fmt.Sprintf("proxy pod of %s is no longer hardened as configured (security context, token, limits, volumes or containers changed)", n))
	}
	return out
}

func container(d *appsv1.Deployment) *corev1.Container {
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == proxyContainer {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

func (sv *Service) ensureService(ctx context.Context, name string, want *corev1.Service) error {
	api := sv.c.Clientset.CoreV1().Services(sv.c.Namespace)
	live, err := api.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := api.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create proxy service %s: %w", want.Name, err)
		}
		sv.log.Info("proxy service created", "topology", name, "service", want.Name)
		return nil
	case err != nil:
		return fmt.Errorf("get proxy service %s: %w", want.Name, err)
	}
	if err := owned(live.Labels, name, "service "+want.Name); err != nil {
		return err
	}
	if d := serviceDrift(want, live); d != "" {
		live.Spec.Selector, live.Spec.Ports = want.Spec.Selector, want.Spec.Ports
		live.Labels = mergeLabels(live.Labels, want.Labels)
		if _, err := api.Update(ctx, live, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update proxy service %s: %w", want.Name, err)
		}
		sv.log.Info("proxy service changed", "topology", name, "service", want.Name, "was", d)
	}
	return nil
}

func serviceDrift(want, live *corev1.Service) string {
	if !equality.Semantic.DeepEqual(want.Spec.Selector, live.Spec.Selector) || len(live.Spec.Ports) != 1 ||
		live.Spec.Ports[0].Port != want.Spec.Ports[0].Port || live.Spec.Ports[0].TargetPort != want.Spec.Ports[0].TargetPort ||
		live.Spec.Ports[0].Protocol != want.Spec.Ports[0].Protocol {
		return fmt.Sprintf("proxy service %s differs from the configuration (selector or ports)", want.Name)
	}
	return ""
}

// owned refuses to change an object of the topology's name that the
// provider did not make.
func owned(l map[string]string, name, what string) error {
	if l[kube.ThreeGateLabelManagedBy] != engine.ManagedByValue || l[kube.ThreeGateLabelTopology] != name {
		return fmt.Errorf("%s already exists and does not belong to topology %q (labels %s=%s, %s=%s); remove it or choose another name",
			what, name, kube.ThreeGateLabelManagedBy, engine.ManagedByValue, kube.ThreeGateLabelTopology, name)
	}
	return nil
}

func mergeLabels(live, want map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range live {
		out[k] = v
	}
	for k, v := range want {
		out[k] = v
	}
	return out
}

// status reads the topology's objects and compares them with w.
func (sv *Service) status(ctx context.Context, s topospec.Spec, w wanted) (Status, error) {
	var st Status
	live, err := sv.topologyPolicies(ctx, s.Name)
	if err != nil {
		return st, err
	}
	byName := map[string]*netv1.NetworkPolicy{}
	for i := range live {
		byName[live[i].Name] = &live[i]
		st.Policies = append(st.Policies, live[i].Name)
	}
	for i := range w.policies {
		p := &w.policies[i]
		l, ok := byName[p.Name]
		if !ok {
			st.Drift = append(st.Drift, fmt.Sprintf("network policy %s is missing", p.Name))
			continue
		}
		if d := policyDrift(p, l); d != "" {
			st.Drift = append(st.Drift, d)
		}
		delete(byName, p.Name)
	}
	for n := range byName {
		st.Drift = append(st.Drift, fmt.Sprintf("network policy %s is not part of the configuration", n))
	}
	d, err := sv.c.Clientset.AppsV1().Deployments(sv.c.Namespace).Get(ctx, w.deployment.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		st.Drift = append(st.Drift, fmt.Sprintf("proxy deployment %s is missing", w.deployment.Name))
	case err != nil:
		return st, fmt.Errorf("get proxy deployment %s: %w", w.deployment.Name, err)
	default:
		st.ProxyDeployment = true
		st.Drift = append(st.Drift, deploymentDrift(w.deployment, d)...)
	}
	svc, err := sv.c.Clientset.CoreV1().Services(sv.c.Namespace).Get(ctx, w.service.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		st.Drift = append(st.Drift, fmt.Sprintf("proxy service %s is missing", w.service.Name))
	case err != nil:
		return st, fmt.Errorf("get proxy service %s: %w", w.service.Name, err)
	default:
		st.ProxyService = true
		if d := serviceDrift(w.service, svc); d != "" {
			st.Drift = append(st.Drift, d)
		}
		if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil {
			st.ServiceURL = proxyURL(ip, s.Proxy.Port)
		}
	}
	if st.ProxyDeployment {
		pod, why, err := sv.proxyPod(ctx, s)
		if err != nil {
			return st, err
		}
		if pod == nil {
			st.Drift = append(st.Drift, fmt.Sprintf("proxy of topology %s is not ready: %s", s.Name, why))
		} else if ip, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
			st.ProxyReady, st.ProxyPodIP, st.ProxyURL = true, ip, proxyURL(ip, s.Proxy.Port)
		}
	}
	return st, nil
}

func proxyURL(ip netip.Addr, port int) string {
	return "http://" + netip.AddrPortFrom(ip, uint16(port)).String()
}

// Teardown removes the topology called name: its proxy, then its
// policies (the agents' LLM policies of the topology too), and nothing
// else. Members left (runner or execution pods labelled with the
// topology) are an error that names them, raised before anything is
// removed. Missing objects are fine, so a half-made topology goes too.
func (sv *Service) Teardown(ctx context.Context, name string) error {
	pods, err := sv.c.Clientset.CoreV1().Pods(sv.c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.ThreeGateLabelTopology + "=" + name})
	if err != nil {
		return fmt.Errorf("list members of topology %q: %w", name, err)
	}
	var members []string
	for _, p := range pods.Items {
		if p.Labels[kube.ThreeGateLabelRole] != topospec.RoleProxy && p.DeletionTimestamp == nil {
			members = append(members, fmt.Sprintf("%s (%s)", p.Name, p.Labels[kube.ThreeGateLabelRole]))
		}
	}
	if len(members) > 0 {
		return fmt.Errorf("topology %q still has members: %s; remove those agents first (without the topology's policies they would run unconfined)",
			name, strings.Join(members, ", "))
	}
	sv.log.Debug("removing threegate topology", "topology", name, "namespace", sv.c.Namespace)
	fg := metav1.DeletePropagationForeground
	pn := topospec.ProxyName(name)
	err = sv.c.Clientset.AppsV1().Deployments(sv.c.Namespace).Delete(ctx, pn, metav1.DeleteOptions{PropagationPolicy: &fg})
	switch {
	case err == nil:
		sv.log.Info("proxy deployment removed", "topology", name, "deployment", pn)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("delete proxy deployment %s: %w", pn, err)
	}
	if err := sv.waitProxyGone(ctx, name); err != nil {
		return err
	}
	sn := kube.EgressKeySecretName(name)
	err = sv.c.Clientset.CoreV1().Secrets(sv.c.Namespace).Delete(ctx, sn, metav1.DeleteOptions{})
	switch {
	case err == nil:
		sv.log.Info("egress key secret removed", "topology", name, "secret", sn)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("delete egress key secret %s: %w", sn, err)
	}
	err = sv.c.Clientset.CoreV1().Services(sv.c.Namespace).Delete(ctx, pn, metav1.DeleteOptions{})
	switch {
	case err == nil:
		sv.log.Info("proxy service removed", "topology", name, "service", pn)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("delete proxy service %s: %w", pn, err)
	}
	list, err := sv.c.Clientset.NetworkingV1().NetworkPolicies(sv.c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: ownedSelector(name)})
	if err != nil {
		return fmt.Errorf("list network policies: %w", err)
	}
	var errs []error
	for _, p := range list.Items {
		errs = append(errs, sv.deletePolicy(ctx, name, p.Name))
	}
	return errors.Join(errs...)
}

// Import reads the topology called name back from its proxy Deployment.
// A *NotFoundError means there is none of the provider's.
func (sv *Service) Import(ctx context.Context, name string) (topospec.Spec, error) {
	d, err := sv.c.Clientset.AppsV1().Deployments(sv.c.Namespace).Get(ctx, topospec.ProxyName(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return topospec.Spec{}, &topospec.NotFoundError{Name: name, Where: "the cluster", Err: fmt.Errorf("no deployment %s in namespace %s", topospec.ProxyName(name), sv.c.Namespace)}
	}
	if err != nil {
		return topospec.Spec{}, fmt.Errorf("get proxy deployment %s: %w", topospec.ProxyName(name), err)
	}
	if err := owned(d.Labels, name, "deployment "+d.Name); err != nil {
		return topospec.Spec{}, &topospec.NotFoundError{Name: name, Where: "the cluster", Err: err}
	}
	c := container(d)
	if c == nil {
		return topospec.Spec{}, &topospec.NotFoundError{Name: name, Where: "the cluster", Err: fmt.Errorf("deployment %s has no %s container", d.Name, proxyContainer)}
	}
	if text, ok := d.Annotations[AnnotationSpec]; ok {
		s, err := topospec.ParseRecord(text)
		if err != nil {
			return s, fmt.Errorf("topology %q: the record on deployment %s: %w", name, d.Name, err)
		}
		if s.Name != name {
			return s, fmt.Errorf("topology %q: the record on deployment %s is topology %q's", name, d.Name, s.Name)
		}
		if ps := Check(s); len(ps) > 0 {
			return s, fmt.Errorf("topology %q as recorded is not valid: %w", name, ps[0])
		}
		sv.log.Debug("threegate topology read from its record", "topology", name, "allow_entries", len(s.Proxy.Allow))
		return s, nil
	}
	// Made by a release before records: rebuilt, once, from the command
	// line; the next apply writes the record.
	l := topospec.ReadLegacyArgs(c.Args)
	in := topospec.Input{Name: name, Proxy: topospec.ProxyInput{Image: c.Image, Allow: l.Allow, DNS: l.DNS}}
	if i := strings.LastIndex(l.Listen, ":"); i >= 0 {
		in.Proxy.Port, _ = strconv.Atoi(l.Listen[i+1:])
	}
	for i, dns := range in.Proxy.DNS {
		in.Proxy.DNS[i] = strings.TrimSuffix(dns, ":53")
	}
	s, ps := Build(in)
	if len(ps) > 0 {
		return s, fmt.Errorf("topology %q as found is not valid: %w", name, ps[0])
	}
	sv.log.Debug("threegate topology read from its command line (no record)", "topology", name, "allow_entries", len(s.Proxy.Allow))
	return s, nil
}
