package provider

import (
	"context"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/querycheck"
	"github.com/hashicorp/terraform-plugin-testing/querycheck/queryfilter"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubedeploy"
	"github.com/bogpad/terraform-provider-meepa/internal/testkube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccKube_list: on a cluster, `terraform query` lists the topology
// applied here and an agent by its config Secret, each with the kubernetes
// backend in its identity; a runner Deployment without its Secret and a
// topology's policy without its proxy are listed only as orphans.
func TestAccKube_list(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kube-list")
	base := testutil.EnsureBusybox(t, testutil.Docker(t))
	ctx := context.Background()
	agent, orphanAgent, orphanTopo := "klist-agent", "klist-orphan", "klist-gone"
	// What the listing reads, made by hand: the agent's config Secret; a
	// runner Deployment of another agent with no Secret; a policy of a
	// topology with no proxy.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: kubedeploy.NamesFor(agent).Base, Labels: kubedeploy.Labels(agent)}}
	if _, err := c.Clientset.CoreV1().Secrets(c.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zero := int32(0)
	labels := kubedeploy.Labels(orphanAgent)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: kubedeploy.NamesFor(orphanAgent).Base, Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "runner", Image: "none.invalid/none:0"}}}}},
	}
	if _, err := c.Clientset.AppsV1().Deployments(c.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pol := &netv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: orphanTopo + "-default-deny", Labels: kube.ThreeGateObjectLabels(orphanTopo)},
		Spec: netv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{kube.ThreeGateLabelTopology: orphanTopo}}}}
	if _, err := c.Clientset.NetworkingV1().NetworkPolicies(c.Namespace).Create(ctx, pol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The namespace goes with the test (testkube.Cluster), and these with it.
	agentID := func(id string) map[string]knownvalue.Check {
		return map[string]knownvalue.Check{"agent_id": knownvalue.StringExact(id), "backend": knownvalue.StringExact("kubernetes")}
	}
	topo := func(name string) map[string]knownvalue.Check {
		return map[string]knownvalue.Check{"name": knownvalue.StringExact(name), "backend": knownvalue.StringExact("kubernetes")}
	}
	resource.Test(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_14_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: kubeProvider(t, c, testkube.Registry(t)) + kubeImage(base) + `
resource "threegate_network" "tg" {
  provider = meepa
  name     = "klist"
  proxy    = { image = meepa_isolation_image.agents.isolated_image, allow = ["192.0.2.10:443"] }
}
`,
		}, {
			Query: true,
			Config: `
list "threegate_network" "all" {
  provider = meepa
}
list "threegate_network" "orphans" {
  provider = meepa
  config {
    orphans = true
  }
}
list "meepa_agent" "all" {
  provider = meepa
}
list "meepa_agent" "orphans" {
  provider = meepa
  config {
    orphans = true
  }
}
`,
			QueryResultChecks: []querycheck.QueryResultCheck{
				querycheck.ExpectLength("threegate_network.all", 1),
				querycheck.ExpectIdentity("threegate_network.all", topo("klist")),
				querycheck.ExpectLength("threegate_network.orphans", 1),
				querycheck.ExpectResourceDisplayName("threegate_network.orphans", queryfilter.ByResourceIdentity(topo(orphanTopo)),
					knownvalue.StringRegexp(regexp.MustCompile(`^orphan topology `+orphanTopo+`: its NetworkPolicies `+orphanTopo+`-default-deny are left`))),
				querycheck.ExpectLength("meepa_agent.all", 1),
				querycheck.ExpectIdentity("meepa_agent.all", agentID(agent)),
				querycheck.ExpectLength("meepa_agent.orphans", 1),
				querycheck.ExpectResourceDisplayName("meepa_agent.orphans", queryfilter.ByResourceIdentity(agentID(orphanAgent)),
					knownvalue.StringRegexp(regexp.MustCompile(`^orphan agent `+orphanAgent+`: its runner Deployment .* is left without its config Secret`))),
			},
		}},
	})
}
