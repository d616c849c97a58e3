package kubetopology

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/probe"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// DefaultProbeSettle is how long a probe pod waits before its checks: a
// network plugin puts a new pod under its policies a moment after the pod
// has its address (kube-router: about a second), and a check made before
// that would see the pod unconfined.
const DefaultProbeSettle = 3 * time.Second

// LabelProbe marks Verify's probe pods.
const LabelProbe = "meepa.io/threegate-probe"

// kubeProbe is one probe pod: the member labels it wears and its rows.
type kubeProbe struct {
	topospec.ProbeRows // Role is the Report's role column, e.g. "CORE/runner"
	labels             map[string]string
	env                []corev1.EnvVar
}

// Verify runs short-lived probe pods that wear the member labels of each
// kind of member (CORE runner and execution pod, FETCH runner and
// execution pod, TOOL_EXEC execution pod), and compares what they reach
// with what the topology allows. It uses topology's rows, expectations
// and probe checks; the targets are the proxy pod, an API server
// endpoint, a node (at o.HostPort) and the operator's targets. The
// topology must have been applied (its proxy ready).
//
// A denial by kube-router is a reject, which a TCP dial sees as
// "refused", like a closed port; so "blocked" rows pass on refused too.
// The proxy and the API server are known to listen (their open rows show
// it), so for them a refusal is the policy's; for the node and the
// outside address name a port that listens, or the row proves less.
//
// The probe pods run `sh -c "sleep …; exec agent-runner probe …"`, so the
// image needs a shell and sleep unless Options.ProbeSettle is negative.
func (sv *Service) Verify(ctx context.Context, s topospec.Spec, o topospec.VerifyOptions) (topospec.Report, error) {
	o, _ = o.WithDefaults(s)
	st, err := sv.Read(ctx, s)
	if err != nil {
		return topospec.Report{}, err
	}
	if !st.ProxyReady {
		return topospec.Report{}, fmt.Errorf("topology %q: the proxy is not ready (%s); apply the topology before verifying it", s.Name, strings.Join(st.Drift, "; "))
	}
	cluster, err := kube.DiscoverCluster(ctx, sv.c)
	if err != nil {
		return topospec.Report{}, err
	}
	clusterDNS, _, err := kube.ClusterDNS(ctx, sv.c) // invalid when there is none
	if err != nil {
		return topospec.Report{}, err
	}
	proxyAddr := netip.AddrPortFrom(st.ProxyPodIP, uint16(s.Proxy.Port)).String()
	api := apiEndpoint(cluster)
	node := netip.AddrPortFrom(cluster.Nodes[0].Addr(), uint16(o.HostPort)).String()
	tcp := func(target string) probe.Check { return probe.Check{Kind: probe.TCP, Target: target} }
	direct := ""
	if ap, err := netip.ParseAddrPort(o.AllowedTarget); err == nil {
		direct = ap.String()
	}
	blockedOutside := func(kp *kubeProbe) {
		kp.Add("node", topospec.ExpectBlocked, tcp(node))
		if o.OutsideAddress != "" {
			kp.Add("outside address", topospec.ExpectBlocked, tcp(o.OutsideAddress))
		}
		if direct != "" {
			kp.Add("allowed host directly", topospec.ExpectBlocked, tcp(direct))
		}
	}

	coreRunner := &kubeProbe{ProbeRows: topospec.ProbeRows{Role: topospec.RoleCore + "/runner"}, labels: kube.ThreeGateRunnerLabels(s.Name, topospec.RoleCore)}
	coreRunner.Add("API server", topospec.ExpectOpen, tcp(api))
	coreRunner.Add("proxy", topospec.ExpectBlocked, tcp(proxyAddr))
	blockedOutside(coreRunner)

	core := &kubeProbe{ProbeRows: topospec.ProbeRows{Role: topospec.RoleCore + "/execution"}, labels: kube.ThreeGateExecutionLabels(s.Name, topospec.RoleCore)}
	core.Add("proxy", topospec.ExpectBlocked, tcp(proxyAddr))
	core.Add("API server", topospec.ExpectBlocked, tcp(api))
	blockedOutside(core)

	fetchRunner := &kubeProbe{ProbeRows: topospec.ProbeRows{Role: topospec.RoleFetch + "/runner"}, labels: kube.ThreeGateRunnerLabels(s.Name, topospec.RoleFetch)}
	fetchRunner.Add("API server", topospec.ExpectOpen, tcp(api))
	fetchRunner.Add("proxy", topospec.ExpectOpen, tcp(proxyAddr)) // to revoke its messages' credentials

	fetch := &kubeProbe{ProbeRows: topospec.ProbeRows{Role: topospec.RoleFetch + "/execution"}, labels: kube.ThreeGateExecutionLabels(s.Name, topospec.RoleFetch)}
	key, err := kube.EgressKey(ctx, sv.c, s.Name)
	if err != nil {
		return topospec.Report{}, err
	}
	auth, err := topospec.ProbeCredential(key, o.Timeout)
	if err != nil {
		return topospec.Report{}, err
	}
	fetch.env = []corev1.EnvVar{{Name: probe.EnvProxyAuthorization, Value: auth}}
	fetch.Add("proxy", topospec.ExpectOpen, tcp(proxyAddr))
	if o.AllowedTarget != "" {
		fetch.Add("allowed host via proxy", topospec.ExpectAllowed, probe.Check{Kind: probe.Connect, Via: proxyAddr, Target: o.AllowedTarget})
	}
	if t := o.AnyTarget(); t != "" {
		fetch.Add("proxy, no credential", topospec.ExpectAuthRequired, probe.Check{Kind: probe.ConnectAnon, Via: proxyAddr, Target: t})
	}
	if o.DeniedTarget != "" {
		fetch.Add("disallowed host via proxy", topospec.ExpectDenied, probe.Check{Kind: probe.Connect, Via: proxyAddr, Target: o.DeniedTarget})
	}
	if o.OutsideAddress != "" {
		fetch.Add("outside address via proxy", topospec.ExpectDenied, probe.Check{Kind: probe.Connect, Via: proxyAddr, Target: o.OutsideAddress})
	}
	fetch.Add("API server", topospec.ExpectBlocked, tcp(api))
	blockedOutside(fetch)

	tool := &kubeProbe{ProbeRows: topospec.ProbeRows{Role: topospec.RoleToolExec + "/execution"}, labels: kube.ThreeGateExecutionLabels(s.Name, topospec.RoleToolExec)}
	tool.Add("proxy", topospec.ExpectBlocked, tcp(proxyAddr))
	tool.Add("API server", topospec.ExpectBlocked, tcp(api))
	blockedOutside(tool)

	all := []*kubeProbe{coreRunner, core, fetchRunner, fetch, tool}
	for _, kp := range all {
		addDNS(kp, o.DNSName, clusterDNS)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(all))
	for i, kp := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = sv.runProbe(ctx, s, o, i, kp)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return topospec.Report{}, err
	}
	var rep topospec.Report
	for _, kp := range all {
		rep.Probes = append(rep.Probes, kp.Rows...)
	}
	rep.Violations, err = sv.violations(ctx, s)
	return rep, err
}

// probeHostname is every probe pod's hostname, which the kubelet writes
// into the pod's /etc/hosts: the name its "DNS topology name" row must
// resolve without any DNS server.
const probeHostname = "probe"

// addDNS adds a probe's DNS rows, as topology's Verify has them per role:
// an outside name must not resolve through the pod's resolver (its
// resolv.conf names only kube.MemberDNSSink) and the pod's own name must
// (members need no DNS: /etc/hosts carries what they look up). When the
// cluster has a DNS Service, the probe also asks it directly, over UDP
// and TCP port 53, which must fail: the policies give members no port 53.
func addDNS(kp *kubeProbe, outside string, clusterDNS netip.Addr) {
	kp.Add("DNS outside name", topospec.ExpectNoDNS, probe.Check{Kind: probe.DNS, Target: outside})
	kp.Add("DNS topology name", topospec.ExpectDNS, probe.Check{Kind: probe.DNS, Target: probeHostname})
	if clusterDNS.IsValid() {
		srv := netip.AddrPortFrom(clusterDNS, 53).String()
		kp.Add("cluster DNS udp/53", topospec.ExpectBlocked, probe.Check{Kind: probe.DNSAt, Via: srv, Target: outside})
		kp.Add("cluster DNS tcp/53", topospec.ExpectBlocked, probe.Check{Kind: probe.TCP, Target: srv})
	}
}

// apiEndpoint is an address:port of the API server that needs no Service
// data plane: an endpoint rather than the kubernetes Service's address.
func apiEndpoint(cn kube.ClusterNetwork) string {
	for _, a := range cn.APIServer {
		inService := false
		for _, p := range cn.ServiceCIDRs {
			inService = inService || p.Contains(a.Addr())
		}
		if !inService {
			return a.String()
		}
	}
	return cn.APIServer[0].String()
}

// runProbe runs one probe pod, always removes it, and fills the rows'
// observed column.
func (sv *Service) runProbe(ctx context.Context, s topospec.Spec, o topospec.VerifyOptions, i int, kp *kubeProbe) error {
	args := []string{topospec.ProxyBinary, "probe", "--timeout", o.Timeout.String()}
	for _, c := range kp.Checks {
		args = append(args, c.String())
	}
	settle := sv.o.ProbeSettle
	if settle == 0 {
		settle = DefaultProbeSettle
	}
	cmd := args
	if settle > 0 {
		quoted := make([]string, len(args))
		for j, a := range args {
			quoted[j] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		cmd = []string{"/bin/sh", "-c", "sleep " + strconv.FormatFloat(settle.Seconds(), 'f', -1, 64) + " && exec " + strings.Join(quoted, " ")}
	}
	labels := mergeLabels(kp.labels, kube.ThreeGateObjectLabels(s.Name))
	labels[LabelProbe] = "true"
	uid, no, yes, grace := ProxyUID, false, true, int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-probe-%d-%d", s.Name, i, time.Now().UnixNano()%1e6), Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no, EnableServiceLinks: &no,
			TerminationGracePeriodSeconds: &grace, Hostname: probeHostname,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "probe", Image: o.Image, ImagePullPolicy: sv.o.PullPolicy, Command: cmd, Env: kp.env,
				SecurityContext: &corev1.SecurityContext{
					Privileged: &no, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	kube.MemberDNS(&pod.Spec) // as the members it stands for
	pods := sv.c.Clientset.CoreV1().Pods(sv.c.Namespace)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("probe %s: create pod: %w", kp.Role, err)
	}
	sv.log.Debug("probe pod created", "topology", s.Name, "pod", pod.Name, "role", kp.Role, "checks", len(kp.Checks))
	defer func() {
		// A fresh context: the probe must go even when ctx was cancelled.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		zero := int64(0)
		if err := pods.Delete(rctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err == nil || apierrors.IsNotFound(err) {
			sv.log.Debug("probe pod removed", "topology", s.Name, "pod", pod.Name)
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, time.Duration(len(kp.Checks)+5)*o.Timeout+settle+sv.o.ReadyTimeout)
	defer cancel()
	for {
		p, err := pods.Get(wctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("probe %s: %w", kp.Role, err)
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			break
		}
		if err := kube.PodFailed(p); err != nil {
			return fmt.Errorf("probe %s: %w", kp.Role, err)
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("probe %s: pod %s did not finish: %s", kp.Role, pod.Name, kube.PodState(p))
		case <-time.After(250 * time.Millisecond):
		}
	}
	raw, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("probe %s: logs: %w", kp.Role, err)
	}
	var results []probe.Result
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		var r probe.Result
		if err := json.Unmarshal(sc.Bytes(), &r); err == nil && r.Kind != "" {
			results = append(results, r)
		}
	}
	if len(results) != len(kp.Rows) {
		return fmt.Errorf("probe %s: %d results for %d checks (does %s contain %s with the probe command, and /bin/sh?): %s",
			kp.Role, len(results), len(kp.Rows), o.Image, topospec.ProxyBinary, strings.TrimSpace(string(raw)))
	}
	for j, r := range results {
		kp.Rows[j].Observed, kp.Rows[j].Detail = r.Observed, r.Detail
		kp.Rows[j].Pass = topospec.Passes(kp.Rows[j].Expected, r.Observed, true)
	}
	return nil
}

// violations lists pods that wear the topology's labels in a way no
// member should: a PROXY pod that is not the topology's proxy (the FETCH
// policy would let FETCH reach it), and a pod that is both a runner and
// an execution pod.
func (sv *Service) violations(ctx context.Context, s topospec.Spec) ([]string, error) {
	list, err := sv.c.Clientset.CoreV1().Pods(sv.c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.ThreeGateLabelTopology + "=" + s.Name})
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	var out []string
	for _, p := range list.Items {
		l := p.Labels
		switch {
		case l[LabelProbe] == "true":
		case l[kube.ThreeGateLabelRole] == topospec.RoleProxy && (p.Annotations[AnnotationConfig] == "" || !ownedByReplicaSet(p)):
			out = append(out, fmt.Sprintf("pod %s claims the PROXY role but is not the topology's proxy", p.Name))
		case l[kube.ThreeGateLabelRunner] == "true" && l[kube.ThreeGateLabelExecution] == "true":
			out = append(out, fmt.Sprintf("pod %s is labelled both as a runner and as an execution pod", p.Name))
		}
	}
	return out, nil
}

func ownedByReplicaSet(p corev1.Pod) bool {
	for _, r := range p.OwnerReferences {
		if r.Kind == "ReplicaSet" && strings.HasPrefix(r.Name, topospec.ProxyName(p.Labels[kube.ThreeGateLabelTopology])+"-") {
			return true
		}
	}
	return false
}
