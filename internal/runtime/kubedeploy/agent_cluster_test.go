package kubedeploy

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/testkube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

const secretValue = "ghp_kubedeploy_secret_value"

func testAgent(id, image, volume string) Agent {
	empty := ""
	return Agent{
		Config: agentspec.Config{
			AgentID: id,
			Container: agentspec.ContainerMode{Enabled: true, Image: image, MemoryLimit: agentspec.SizeOf(128 << 20), TimeoutSeconds: 60,
				Network: "bridge", Prestart: true},
			LLM:     agentspec.LLMConfig{Provider: "offline", APIKey: "sk-kubedeploy-key"},
			Secrets: map[string]string{"GH": secretValue},
		},
		PullPolicy: corev1.PullNever,
		Workspace:  Workspace{StorageClass: &empty, Volume: volume},
	}
}

// An agent on the cluster with the service alone: applied, answered
// through a port-forward by a fresh message pod, held to its RBAC, its
// config only in its Secret, rolled on a config change, restored after
// drift, removed with its workspace claim kept, then removed by force.
func TestAgentOnCluster(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kd")
	image := testkube.RunnerImage(t)
	id := "tf-acc-agent"
	volume := workspaceVolume(t, c, id)
	svc := NewService(Options{Client: c, Version: "test", APIServer: testkube.APIServer(t, c), Logger: testLogger{t}})
	ctx := context.Background()
	testutil.Cleanup(t, "remove the agent", func() error { return svc.Remove(context.Background(), id, true) })

	a := testAgent(id, image, volume)
	begin := time.Now()
	out, err := svc.Apply(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("apply (new agent) took %s", time.Since(begin).Round(time.Millisecond))
	if out.RunnerStatus != agentspec.StatusRunning || out.RunnerPod == "" || out.Token == "" || out.ConfigHash == "" {
		t.Fatalf("Apply = %+v", out)
	}
	a.Config.Token = out.Token
	waiting := waitPrestarted(t, c, id, "")
	checkConfigOnlyInSecret(t, c, id, out.Token)
	checkRBAC(t, c, id)

	addr := testkube.Forward(t, c, out.RunnerPod, DefaultPort)
	begin = time.Now()
	code, reply := send(t, addr, out.Token, "hello")
	t.Logf("message round trip (prestarted pod) took %s", time.Since(begin).Round(time.Millisecond))
	if code != 200 || reply["reply"] != agent.OfflineAnswer("hello") {
		t.Fatalf("message: %d %v", code, reply)
	}
	waitPodGone(t, c, waiting)
	next := waitPrestarted(t, c, id, waiting)
	t.Logf("message pod %s used and deleted; %s waits for the next", waiting, next)
	if code, _ := send(t, addr, "wrong-token", "hello"); code != 401 {
		t.Errorf("a wrong token: %d, want 401", code)
	}
	// The backend's own Send (the meepa_agent_message action): the token
	// from the Secret, through a port-forward of its own.
	if r, err := NewBackend(svc).Send(ctx, id, "hello", time.Minute); err != nil || r.Failed() || r.Reply != agent.OfflineAnswer("hello") {
		t.Fatalf("Send = %+v, %v", r, err)
	}

	obs, err := svc.Read(ctx, a)
	if err != nil || obs.Drift() || obs.RunnerPod != out.RunnerPod || obs.ConfigHash != out.ConfigHash {
		t.Fatalf("Read after apply = %+v, %v; want no drift", obs, err)
	}

	imp, err := svc.Import(ctx, id)
	if err != nil || imp.Config.Token != out.Token || imp.Config.Secrets["GH"] != secretValue || imp.PullPolicy != corev1.PullNever ||
		imp.RunnerImage != "" || imp.Workspace.Volume != volume {
		t.Errorf("Import = %+v, %v", imp, err)
	}

	// A changed config rolls the runner: a new pod, never two at once.
	a.Config.MaxSteps = 7
	begin = time.Now()
	out2, err := svc.Apply(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("apply (config change, runner rolled) took %s", time.Since(begin).Round(time.Millisecond))
	if out2.ConfigHash == out.ConfigHash || out2.RunnerPod == out.RunnerPod || out2.Token != out.Token {
		t.Errorf("config change: %+v after %+v; want a new hash and pod, the same token", out2, out)
	}
	if pods, _ := svc.runnerPods(ctx, id); len(pods) != 1 || pods[0].Name != out2.RunnerPod {
		t.Errorf("runner pods after the roll: %d", len(pods))
	}

	checkDrift(t, svc, c, a)
	checkRemove(t, svc, c, id)
}

// The config (token, API key, secrets) is in the Secret and nowhere else:
// no ConfigMap, no env var, no annotation.
func checkConfigOnlyInSecret(t *testing.T, c *kube.Client, id, token string) {
	t.Helper()
	ctx := context.Background()
	n := NamesFor(id)
	cfg := secretConfig(t, c, id)
	if cfg.Token != token || cfg.Secrets["GH"] != secretValue || cfg.LLM.APIKey != "sk-kubedeploy-key" ||
		cfg.Kubernetes == nil || cfg.Kubernetes.WorkspaceClaim != n.Claim || cfg.Kubernetes.Namespace != c.Namespace {
		t.Errorf("config in the Secret: %+v", cfg)
	}
	leaks := func(where, s string) {
		for _, v := range []string{token, secretValue, "sk-kubedeploy-key"} {
			if strings.Contains(s, v) {
				t.Errorf("%s holds a secret value", where)
			}
		}
	}
	cms, err := c.Clientset.CoreV1().ConfigMaps(c.Namespace).List(ctx, metav1.ListOptions{})
	testutil.Must(t, err)
	for _, cm := range cms.Items {
		raw, _ := json.Marshal(cm)
		leaks("ConfigMap "+cm.Name, string(raw))
	}
	pods, err := c.Clientset.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{})
	testutil.Must(t, err)
	if len(pods.Items) < 2 {
		t.Errorf("%d pods, want the runner and its prestarted message pod", len(pods.Items))
	}
	for _, p := range pods.Items {
		raw, _ := json.Marshal(p.Spec)
		leaks("pod spec "+p.Name, string(raw))
		meta, _ := json.Marshal(p.ObjectMeta)
		leaks("pod metadata "+p.Name, string(meta))
	}
	dep, err := c.Clientset.AppsV1().Deployments(c.Namespace).Get(ctx, n.Base, metav1.GetOptions{})
	testutil.Must(t, err)
	raw, _ := json.Marshal(dep)
	leaks("Deployment", string(raw))
}

// secretConfig is the runner config in the agent's Secret.
func secretConfig(t *testing.T, c *kube.Client, id string) agentspec.Config {
	t.Helper()
	sec, err := c.Clientset.CoreV1().Secrets(c.Namespace).Get(context.Background(), NamesFor(id).Base, metav1.GetOptions{})
	testutil.Must(t, err)
	var cfg agentspec.Config
	testutil.Must(t, json.Unmarshal(sec.Data[SecretConfigKey], &cfg))
	return cfg
}

// The runner's ServiceAccount may make, attach to, list and delete pods in
// its namespace (list also finds an ask target's runner pod), and nothing
// else: no patch, no Secrets, no Services or endpoints.
func checkRBAC(t *testing.T, c *kube.Client, id string) {
	t.Helper()
	user := "system:serviceaccount:" + c.Namespace + ":" + NamesFor(id).Base
	for _, tc := range []struct {
		ns, group, resource, sub, verb string
		allowed                        bool
	}{
		{c.Namespace, "", "pods", "", "create", true},
		{c.Namespace, "", "pods", "", "delete", true},
		{c.Namespace, "", "pods", "", "watch", true},
		{c.Namespace, "", "pods", "", "list", true},
		{c.Namespace, "", "pods", "attach", "create", true},
		{c.Namespace, "", "pods", "", "patch", false},
		{c.Namespace, "", "pods", "", "update", false},
		{c.Namespace, "", "pods", "portforward", "create", false},
		{c.Namespace, "", "services", "", "get", false},
		{c.Namespace, "", "endpoints", "", "list", false},
		{c.Namespace, "", "pods", "exec", "create", false},
		{c.Namespace, "", "secrets", "", "list", false},
		{c.Namespace, "", "secrets", "", "get", false},
		{c.Namespace, "", "configmaps", "", "get", false},
		{c.Namespace, "apps", "deployments", "", "create", false},
		{c.Namespace, "rbac.authorization.k8s.io", "roles", "", "create", false},
		{"default", "", "pods", "", "create", false},
		{"default", "", "pods", "", "list", false},
	} {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + c.Namespace, "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: tc.ns, Group: tc.group, Resource: tc.resource, Subresource: tc.sub, Verb: tc.verb},
		}}
		got, err := c.Clientset.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
		testutil.Must(t, err)
		if got.Status.Allowed != tc.allowed {
			t.Errorf("%s %s/%s %s in %s: allowed %v, want %v", tc.verb, tc.resource, tc.sub, tc.group, tc.ns, got.Status.Allowed, tc.allowed)
		}
	}
}

// Objects deleted or altered out of band are drift, and apply restores
// them.
func checkDrift(t *testing.T, svc *Service, c *kube.Client, a Agent) {
	t.Helper()
	ctx := context.Background()
	n := NamesFor(a.Config.AgentID)
	rbac := c.Clientset.RbacV1().Roles(c.Namespace)
	testutil.Must(t, rbac.Delete(ctx, n.Base, metav1.DeleteOptions{}))
	testutil.Must(t, c.Clientset.CoreV1().Services(c.Namespace).Delete(ctx, n.Base, metav1.DeleteOptions{}))
	obs, err := svc.Read(ctx, a)
	testutil.Must(t, err)
	if !slices.Contains(obs.Missing, "Role") || !slices.Contains(obs.Missing, "Service") || !obs.Drift() {
		t.Errorf("Read after deleting the Role and Service: %+v", obs)
	}
	if _, err := svc.Apply(ctx, a); err != nil {
		t.Fatal(err)
	}
	role, err := rbac.Get(ctx, n.Base, metav1.GetOptions{})
	testutil.Must(t, err)
	role.Rules[0].Verbs = append(role.Rules[0].Verbs, "patch")
	_, err = rbac.Update(ctx, role, metav1.UpdateOptions{})
	testutil.Must(t, err)
	if obs, _ := svc.Read(ctx, a); !slices.Contains(obs.Changed, "Role") {
		t.Errorf("Read after widening the Role: %+v", obs)
	}
	if _, err := svc.Apply(ctx, a); err != nil {
		t.Fatal(err)
	}
	if obs, err := svc.Read(ctx, a); err != nil || obs.Drift() {
		t.Errorf("Read after the restoring apply: %+v, %v", obs, err)
	}
}

// Remove keeps the workspace claim; a forced Remove deletes it.
func checkRemove(t *testing.T, svc *Service, c *kube.Client, id string) {
	t.Helper()
	ctx := context.Background()
	n := NamesFor(id)
	testutil.Must(t, svc.Remove(ctx, id, false))
	cs := c.Clientset
	if _, err := cs.CoreV1().PersistentVolumeClaims(c.Namespace).Get(ctx, n.Claim, metav1.GetOptions{}); err != nil {
		t.Errorf("claim after Remove: %v, want it kept", err)
	}
	gone := func(kind string, err error) {
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s after Remove: %v, want not found", kind, err)
		}
	}
	_, err := cs.CoreV1().Secrets(c.Namespace).Get(ctx, n.Base, metav1.GetOptions{})
	gone("Secret", err)
	_, err = cs.AppsV1().Deployments(c.Namespace).Get(ctx, n.Base, metav1.GetOptions{})
	gone("Deployment", err)
	_, err = cs.RbacV1().Roles(c.Namespace).Get(ctx, n.Base, metav1.GetOptions{})
	gone("Role", err)
	_, err = cs.CoreV1().ServiceAccounts(c.Namespace).Get(ctx, n.Base, metav1.GetOptions{})
	gone("ServiceAccount", err)
	if pods, _ := cs.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Errorf("%d pods left after Remove", len(pods.Items))
	}
	testutil.Must(t, svc.Remove(ctx, id, true))
	_, err = cs.CoreV1().PersistentVolumeClaims(c.Namespace).Get(ctx, n.Claim, metav1.GetOptions{})
	gone("claim after a forced Remove", err)
}

// waitPrestarted returns the agent's waiting message pod other than not.
func waitPrestarted(t *testing.T, c *kube.Client, id, not string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		list, err := c.Clientset.CoreV1().Pods(c.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: kube.AgentSelector(id)})
		testutil.Must(t, err)
		for _, p := range list.Items {
			if p.Name != not && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				return p.Name
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no prestarted message pod of %s", id)
	return ""
}

func waitPodGone(t *testing.T, c *kube.Client, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		_, err := c.Clientset.CoreV1().Pods(c.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("message pod %s not deleted", name)
}

// A runner that cannot start fails Apply with what the pod shows, and a
// new agent leaves no Secret behind.
func TestAgentOnClusterBadImage(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kd")
	id := "tf-acc-bad"
	volume := workspaceVolume(t, c, id)
	svc := NewService(Options{Client: c, Version: "test", APIServer: testkube.APIServer(t, c), ReadyTimeout: time.Minute})
	testutil.Cleanup(t, "remove the agent", func() error { return svc.Remove(context.Background(), id, true) })
	_, err := svc.Apply(context.Background(), testAgent(id, "meepa.local/not-imported:1", volume))
	if err == nil || !strings.Contains(err.Error(), "ErrImageNeverPull") {
		t.Fatalf("Apply with an image the node lacks: %v, want ErrImageNeverPull", err)
	}
	_, err = c.Clientset.CoreV1().Secrets(c.Namespace).Get(context.Background(), NamesFor(id).Base, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("Secret after a failed first apply: %v, want it removed", err)
	}
}

type testLogger struct{ t *testing.T }

func (l testLogger) log(level, msg string, args ...any) {
	l.t.Helper()
	l.t.Log(append([]any{level, msg}, args...)...)
}
func (l testLogger) Trace(string, ...any)          {}
func (l testLogger) Debug(msg string, args ...any) { l.log("debug", msg, args...) }
func (l testLogger) Info(msg string, args ...any)  { l.log("info", msg, args...) }
func (l testLogger) Warn(msg string, args ...any)  { l.log("warn", msg, args...) }
func (l testLogger) Error(msg string, args ...any) { l.log("error", msg, args...) }
