package provider

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/config"
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

// TestAccKube_threegate applies examples/kubernetes (the quickstart's
// topology on a cluster) through terraform on the test cluster: the proxy a
// Deployment, CORE asking TOOL-EXEC and FETCH through the runners, each gate
// refusing what its role may not do, TOOL-EXEC's pods reaching neither the
// API server nor the proxy, FETCH reaching the web only through the proxy,
// and threegate_verify's probe pods passing every row.
func TestAccKube_threegate(t *testing.T) {
	testAccPreCheck(t)
	// The example names its provider bogpad/meepa.
	t.Setenv("TF_ACC_PROVIDER_NAMESPACE", "bogpad")
	c := testkube.Cluster(t, "tf-acc-kube-tg")
	cli := testutil.Docker(t)
	base := testutil.EnsureBusybox(t, cli)
	reg := testkube.Registry(t)
	ids := map[string]string{"te": "kt-exec", "fetch": "kt-fetch", "core": "kt-core"}
	for _, id := range ids {
		testkube.ReservedVolume(t, c, kubedeploy.NamesFor(id).Claim, kubedeploy.DefaultWorkspaceSize)
	}
	api := testkube.APIServer(t, c)
	vars := config.Variables{
		"kubeconfig": config.StringVariable(testkube.ConfigPath(t)), "namespace": config.StringVariable(c.Namespace),
		"api_server": config.StringVariable(api), "registry": config.StringVariable(reg), "registry_insecure": config.BoolVariable(true),
		"base_image": config.StringVariable(base), "prefix": config.StringVariable("kt"),
		"allow": config.ListVariable(config.StringVariable("192.0.2.10:443")), "dns": config.ListVariable(),
	}
	send := func(s *terraform.State, addr, text string) (string, error) {
		a := s.RootModule().Resources[addr].Primary.Attributes
		fwd := testkube.Forward(t, c, a["runner_container_id"], kubedeploy.DefaultPort)
		port, err := strconv.Atoi(fwd[strings.LastIndex(fwd, ":")+1:])
		if err != nil {
			return "", err
		}
		r, code, err := sendTo(deploy.Listener{Port: port}, a["token"], text)
		if err != nil || code != 200 {
			return "", fmt.Errorf("%s %q: %d %v", addr, text, code, err)
		}
		return r.Reply, nil
	}
	apiHost, apiPort, _ := strings.Cut(api, ":")
	resource.Test(t, resource.TestCase{
		TerraformVersionChecks: []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		Steps: []resource.TestStep{{
			// The example's required_providers block makes the providers
			// the step's.
			ProtoV6ProviderFactories: testAccProviders,
			ConfigDirectory:          config.StaticDirectory("../../examples/kubernetes"),
			ConfigVariables:          vars,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.threegate_verify.tg", tfjsonpath.New("passed"), knownvalue.Bool(true)),
				statecheck.ExpectKnownValue("threegate_network.tg", tfjsonpath.New("proxy_container_id"), knownvalue.StringExact("kt-tg-proxy")),
			},
			Check: func(s *terraform.State) error {
				t.Logf("threegate_verify on the cluster:\n%s", s.RootModule().Resources["data.threegate_verify.tg"].Primary.Attributes["table"])
				proxy := strings.TrimPrefix(s.RootModule().Resources["threegate_network.tg"].Primary.Attributes["proxy_url"], "http://")
				proxyHost, proxyPort, _ := strings.Cut(proxy, ":")
				reach := fmt.Sprintf(`!sh for a in "%s %s" "%s %s"; do nc -w 3 $a </dev/null 2>&1; echo "== $a $?"; done`, apiHost, apiPort, proxyHost, proxyPort)
				checks := []struct {
					addr, text string
					want       []string
				}{
					{"meepa_agent.exec", "!sh echo $((6*7))", []string{"exit 0\n42"}},
					{"meepa_agent.exec", reach, []string{"== " + apiHost + " " + apiPort + " 1", "== " + proxyHost + " " + proxyPort + " 1"}},
					{"meepa_agent.fetch", "!sh echo ran", []string{"not available to this FETCH agent"}},
					{"meepa_agent.fetch", "!fetch http://blocked.example.net/", []string{"untrusted content", "HTTP 403"}},
					{"meepa_agent.core", "!sh echo ran", []string{"not available to this CORE agent"}},
					{"meepa_agent.core", "!ask " + ids["te"] + " !sh echo $((6*7))", []string{"untrusted content from agent " + ids["te"], "exit 0\n42"}},
					{"meepa_agent.core", "!ask " + ids["fetch"] + " !fetch http://blocked.example.net/", []string{"untrusted content from agent " + ids["fetch"], "HTTP 403"}},
					{"meepa_agent.core", "!ask kt-nobody hi", []string{"is not one this agent may ask"}},
				}
				for _, ck := range checks {
					reply, err := send(s, ck.addr, ck.text)
					if err != nil {
						return err
					}
					for _, w := range ck.want {
						if !strings.Contains(reply, w) {
							return fmt.Errorf("%s %q: want %q in the reply:\n%s", ck.addr, ck.text, w, reply)
						}
					}
				}
				return nil
			},
		}},
	})
}
