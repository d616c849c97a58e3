package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubedeploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testkube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccKube_brokeredSecret: on the cluster a fetch agent's bound secret
// is registered, for each message, with its topology's proxy Deployment,
// under the message's credential, through the cluster's policies (the
// runner pod to the proxy pod), and the message pod gets the placeholder
// and the agent's CA. The test cluster has no HTTPS host its proxy may
// reach, so the fetch itself ends at the proxy's dial: what is checked is
// that the message got there (a fetch error in the reply, where a failed
// registration is the runner's 503) and that the proxy's audit has the
// message's bind line naming the secret's agent. A binding on a bridge
// agent of the cluster fails the plan.
func TestAccKube_brokeredSecret(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kube-brk")
	base := testutil.EnsureBusybox(t, testutil.Docker(t))
	id := "kbr-fetch"
	testkube.ReservedVolume(t, c, kubedeploy.NamesFor(id).Claim, kubedeploy.DefaultWorkspaceSize)
	const secret = "s3cret-kube-brokered-77e1"
	head := kubeProvider(t, c, testkube.Registry(t)) + kubeImage(base)
	cfg := head + fmt.Sprintf(`
resource "threegate_network" "tg" {
  provider = meepa
  name     = "kbr"
  proxy = {
    image = meepa_isolation_image.agents.isolated_image
    allow = ["192.0.2.10:443"]
  }
}

resource "meepa_agent" "fetch" {
  agent_id                = %[1]q
  force_destroy_workspace = true
  llm                     = { provider = "offline" }
  container_mode          = { enabled = true, image = meepa_isolation_image.agents.isolated_image }
  threegate               = { network = threegate_network.tg.id, role = "fetch" }
  secrets                 = { API_TOKEN = %[2]q }
  secret_bindings         = { API_TOKEN = { hosts = ["192.0.2.10"], scheme = "Bearer" } }
}
`, id, secret)
	bridge := head + `
resource "meepa_agent" "br" {
  agent_id        = "kbr-bridge"
  llm             = { provider = "offline" }
  container_mode  = { enabled = true, image = meepa_isolation_image.agents.isolated_image, network = "bridge" }
  secrets         = { API_TOKEN = "x" }
  secret_bindings = { API_TOKEN = { hosts = ["192.0.2.10"] } }
}
`
	check := func(s *terraform.State) error {
		reply, err := sendToPod(t, c, s, "meepa_agent.fetch", "!fetch https://192.0.2.10/")
		if err != nil {
			return err
		}
		t.Logf("the fetch on the cluster: %s", reply)
		if !strings.Contains(reply, "fetch https://192.0.2.10/") || strings.Contains(reply, secret) {
			return fmt.Errorf("want the fetch tool's own error, without the secret, got %q", reply)
		}
		audit, err := podLogs(c, topospec.ProxyName("kbr")+"-")
		if err != nil {
			return err
		}
		if !auditHas(audit, func(r proxy.AuditRecord) bool { return r.Decision == proxy.DecisionBind && r.Agent == id }) {
			return fmt.Errorf("no bind line of %s in the proxy's audit:\n%s", id, audit)
		}
		if strings.Contains(audit, secret) {
			return errors.New("the proxy's audit holds the secret")
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			{Config: cfg, Check: check},
			{Config: bridge, PlanOnly: true, ExpectError: errorOn("secret_bindings", `brokered by a threegate topology's egress proxy`)},
		},
	})
}

// podLogs is the log of the first pod of c's namespace whose name starts
// with prefix.
func podLogs(c *kube.Client, prefix string) (string, error) {
	ctx := context.Background()
	pods, err := c.Clientset.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Name, prefix) {
			continue
		}
		rc, err := c.Clientset.CoreV1().Pods(c.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).Stream(ctx)
		if err != nil {
			return "", err
		}
		defer func() { _ = rc.Close() }()
		b, err := io.ReadAll(rc)
		return string(b), err
	}
	return "", fmt.Errorf("no pod named %s… in %s", prefix, c.Namespace)
}
