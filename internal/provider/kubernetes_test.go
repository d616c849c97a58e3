package provider

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubedeploy"
	"github.com/bogpad/terraform-provider-meepa/internal/testkube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// kubeProvider is the provider block for the test cluster's namespace of c
// and a registry at reg.
func kubeProvider(t *testing.T, c *kube.Client, reg string) string {
	return fmt.Sprintf(`
provider "meepa" {
  runner_binary = %q
  kubernetes = {
    config_path = %q
    namespace   = %q
    api_server  = %q
  }
  registry = {
    address  = %q
    insecure = true
  }
}
`, testutil.RunnerBinary(t), testkube.ConfigPath(t), c.Namespace, testkube.APIServer(t, c), reg)
}

// TestAccKube_agent runs the quickstart's first agent on the test cluster
// through terraform: the isolation image built on Docker and pushed to a
// registry the node pulls from, the runner a Deployment, a message answered
// in a fresh pod, an empty second plan, and a destroy that takes the
// runner's objects and, forced, the workspace claim.
func TestAccKube_agent(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kube")
	cli := testutil.Docker(t)
	base := testutil.EnsureBusybox(t, cli)
	reg := testkube.Registry(t)
	id := "kq-helper"
	n := kubedeploy.NamesFor(id)
	testkube.ReservedVolume(t, c, n.Claim, kubedeploy.DefaultWorkspaceSize)
	cfg := kubeProvider(t, c, reg) + fmt.Sprintf(`
resource "meepa_isolation_image" "agents" {
  base_image      = %q
  pull            = "never"
  package_manager = "none"
  env_vars        = { MEEPA_STAGE = "kube" }
}

resource "meepa_agent" "helper" {
  agent_id                = %q
  force_destroy_workspace = true
  llm                     = { provider = "offline" }
  container_mode = {
    enabled      = true
    image        = meepa_isolation_image.agents.isolated_image
    memory_limit = "256m"
  }
}
`, base, id)
	ctx := context.Background()
	resource.Test(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			for what, err := range map[string]error{
				"Deployment": getErr(c.Clientset.AppsV1().Deployments(c.Namespace).Get(ctx, n.Base, metav1.GetOptions{})),
				"Secret":     getErr(c.Clientset.CoreV1().Secrets(c.Namespace).Get(ctx, n.Base, metav1.GetOptions{})),
				"claim":      getErr(c.Clientset.CoreV1().PersistentVolumeClaims(c.Namespace).Get(ctx, n.Claim, metav1.GetOptions{})),
			} {
				if !apierrors.IsNotFound(err) {
					return fmt.Errorf("%s after destroy: %v", what, err)
				}
			}
			return nil
		},
		Steps: []resource.TestStep{{
			Config: cfg,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("meepa_isolation_image.agents", tfjsonpath.New("isolated_image"),
					knownvalue.StringRegexp(regexp.MustCompile("^"+regexp.QuoteMeta(reg+"/meepagateway-isolated:")))),
				statecheck.ExpectKnownValue("meepa_agent.helper", tfjsonpath.New("runner_status"), knownvalue.StringExact(deploy.StatusRunning)),
				statecheck.ExpectKnownValue("meepa_agent.helper", tfjsonpath.New("workspace_path"),
					knownvalue.StringExact("pvc://"+c.Namespace+"/"+n.Claim)),
				statecheck.ExpectKnownValue("meepa_agent.helper", tfjsonpath.New("endpoint"),
					knownvalue.StringExact(fmt.Sprintf("http://%s.%s.svc:%d", n.Base, c.Namespace, kubedeploy.DefaultPort))),
			},
			Check: func(s *terraform.State) error {
				a := s.RootModule().Resources["meepa_agent.helper"].Primary.Attributes
				addr := testkube.Forward(t, c, a["runner_container_id"], kubedeploy.DefaultPort)
				port, err := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
				if err != nil {
					return err
				}
				r, code, err := sendTo(deploy.Listener{Port: port}, a["token"], "hello from the cluster")
				if err != nil || code != 200 || !strings.Contains(r.Reply, "offline: received") {
					return fmt.Errorf("message through the runner pod: %d %+v %v", code, r, err)
				}
				return nil
			},
		}},
	})
}

func getErr[T any](_ T, err error) error { return err }
