package kubedeploy

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

func fakeService() (*Service, *fake.Clientset) {
	cs := fake.NewClientset()
	return NewService(Options{Client: &kube.Client{Clientset: cs, Namespace: "agents"}, Version: "test"}), cs
}

// The objects Apply writes, without a cluster: the completed config in
// the Secret, then Read's drift, Remove keeping the claim, and a forced
// Remove.
func TestObjectsReadRemove(t *testing.T) {
	svc, cs := fakeService()
	seedCluster(t, cs)
	ctx := context.Background()
	a := testAgent("writer", "img", "")
	a.Config.Token = "tok"
	if err := svc.complete(ctx, &a); err != nil {
		t.Fatal(err)
	}
	n := NamesFor("writer")
	claim, err := svc.workspaceClaim(a, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.ensureClaim(ctx, claim); err != nil {
		t.Fatal(err)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	if err := svc.applyObjects(ctx, a, n, key, svc.hash(a, key), nil); err != nil {
		t.Fatal(err)
	}
	// A second apply updates in place.
	if err := svc.applyObjects(ctx, a, n, key, svc.hash(a, key), nil); err != nil {
		t.Fatal(err)
	}
	if err := svc.applyMessagePolicy(ctx, a); err != nil {
		t.Fatal(err)
	}
	// What every agent shares (a fake has no admission API to discover).
	testutil.Must(t, svc.applyNamespacePolicies(ctx))
	adm := cs.AdmissionregistrationV1()
	testutil.Must(t, create(adm.ValidatingAdmissionPolicies().Create(ctx, AdmissionPolicy(), metav1.CreateOptions{})))
	testutil.Must(t, create(adm.ValidatingAdmissionPolicyBindings().Create(ctx, AdmissionBinding(), metav1.CreateOptions{})))
	sec, err := cs.CoreV1().Secrets("agents").Get(ctx, n.Base, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg agentspec.Config
	if err := json.Unmarshal(sec.Data[SecretConfigKey], &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "0.0.0.0:8080" || cfg.Workspace != "/workspace" || cfg.Kubernetes.Namespace != "agents" ||
		cfg.Kubernetes.WorkspaceClaim != n.Claim || cfg.Kubernetes.ImagePullPolicy != "Never" || cfg.Token != "tok" {
		t.Errorf("config in the Secret: %+v %+v", cfg, cfg.Kubernetes)
	}
	obs, err := svc.Read(ctx, a)
	if err != nil || len(obs.Missing) != 0 || len(obs.Changed) != 0 || obs.RunnerStatus != StatusNotReady || !obs.Drift() {
		t.Errorf("Read with no runner pod: %+v, %v", obs, err)
	}
	if err := cs.RbacV1().RoleBindings("agents").Delete(ctx, n.Base, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if obs, _ := svc.Read(ctx, a); !slices.Equal(obs.Missing, []string{"RoleBinding"}) {
		t.Errorf("Read after deleting the RoleBinding: %+v", obs)
	}
	// The ServiceAccount's word on the runner's pods, widened by hand, is
	// drift; so is a shared policy gone.
	sa, err := cs.CoreV1().ServiceAccounts("agents").Get(ctx, n.Base, metav1.GetOptions{})
	testutil.Must(t, err)
	sa.Annotations[AnnoPodImage] = "attacker/image:1"
	testutil.Must(t, create(cs.CoreV1().ServiceAccounts("agents").Update(ctx, sa, metav1.UpdateOptions{})))
	testutil.Must(t, cs.NetworkingV1().NetworkPolicies("agents").Delete(ctx, DefaultDenyPolicyName, metav1.DeleteOptions{}))
	if obs, _ := svc.Read(ctx, a); !slices.Contains(obs.Changed, "ServiceAccount") || !slices.Contains(obs.Missing, "NetworkPolicy "+DefaultDenyPolicyName) {
		t.Errorf("Read after editing the ServiceAccount and deleting the default-deny policy: %+v", obs)
	}
	testutil.Must(t, svc.applyNamespacePolicies(ctx))
	if err := svc.Remove(ctx, "writer", false); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims("agents").Get(ctx, n.Claim, metav1.GetOptions{}); err != nil {
		t.Errorf("claim after Remove: %v", err)
	}
	if _, err := cs.CoreV1().Secrets("agents").Get(ctx, n.Base, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Secret after Remove: %v", err)
	}
	// The last runner of the policy's version is gone: so is the policy.
	if obs, _ := svc.Read(ctx, a); len(obs.Missing) != 9 || !slices.Contains(obs.Missing, "NetworkPolicy") ||
		!slices.Contains(obs.Missing, "ValidatingAdmissionPolicy") || slices.Contains(obs.Missing, "PersistentVolumeClaim") ||
		obs.RunnerStatus != agentspec.StatusMissing {
		t.Errorf("Read after Remove: %+v", obs)
	}
	if err := svc.Remove(ctx, "writer", true); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims("agents").Get(ctx, n.Claim, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("claim after a forced Remove: %v", err)
	}
}

// A config the runner would refuse is refused before anything is made.
func TestCompleteRefuses(t *testing.T) {
	svc, cs := fakeService()
	a := testAgent("writer", "img", "")
	a.Config.Container.Networks = []string{"llmnet"}
	_, err := svc.Apply(context.Background(), a)
	if err == nil || !strings.Contains(err.Error(), "Docker networks") {
		t.Fatalf("Apply with Docker networks: %v", err)
	}
	if list, _ := cs.CoreV1().Secrets("agents").List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Error("a refused agent left a Secret")
	}
	a = testAgent("writer", "img", "")
	a.Config.Container.Runtime = "runsc"
	if _, err := svc.Apply(context.Background(), a); err == nil || !strings.Contains(err.Error(), "RuntimeClass") {
		t.Errorf("Apply with a runtime the cluster lacks: %v", err)
	}
	a = testAgent("Bad/Id", "img", "")
	if _, err := svc.Apply(context.Background(), a); err == nil || !strings.Contains(err.Error(), "agent id") {
		t.Errorf("Apply with a bad id: %v", err)
	}
}

// Apply warns about a namespace that does not enforce restricted Pod
// Security (the runner may create pods there), and only then.
func TestPodSecurityWarning(t *testing.T) {
	svc, cs := fakeService()
	b := NewBackend(svc)
	ctx := context.Background()
	if w := b.podSecurityWarning(ctx); !strings.Contains(w, "Could not read namespace agents") {
		t.Errorf("no namespace: %q", w)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if w := b.podSecurityWarning(ctx); !strings.Contains(w, "does not enforce the restricted Pod Security level") {
		t.Errorf("unlabelled namespace: %q", w)
	}
	ns.Labels = map[string]string{podSecurityLabel: "restricted"}
	if _, err := cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if w := b.podSecurityWarning(ctx); w != "" {
		t.Errorf("restricted namespace: %q", w)
	}
}

// TestCheckBindingsFetchOnly: a cluster brokers a secret through a
// topology's proxy only, so a binding anywhere but on a fetch agent fails
// the check on secret_bindings; a fetch agent's passes.
func TestCheckBindingsFetchOnly(t *testing.T) {
	a := agentspec.Agent{Config: agentspec.Config{
		Container:      agentspec.ContainerMode{Enabled: true, Network: "bridge"},
		Secrets:        map[string]string{"T": "x"},
		SecretBindings: map[string]agentspec.SecretBinding{"T": {Hosts: []string{"api.example.com"}}},
	}}
	var fe *fault.FieldError
	if err := Check(a); !errors.As(err, &fe) || fe.Field != "secret_bindings" {
		t.Fatalf("bridge agent with a binding: %v, want an error on secret_bindings", err)
	}
	a.Config.Container.Network = ""
	a.Meta.ThreegateNetwork, a.Meta.ThreegateRole = "tg", agentspec.RoleFetch
	if err := Check(a); err != nil {
		t.Fatalf("fetch agent with a binding: %v", err)
	}
}
