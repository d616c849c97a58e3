package provider

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/config"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
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

// TestAccKube_agent runs the quickstart's first agent, as
// examples/quickstart/main.tf writes it (soul, memory, network "none"), on
// the test cluster through terraform: the isolation image built on Docker
// and pushed to a registry the node pulls from, the runner a Deployment, a
// message answered in a fresh pod that finds the seeded SOUL.md and
// reaches nothing (its message policy in place), an empty second plan;
// then network "bridge" turns the policy into "public addresses only": the
// pod still cannot reach the API server or the metadata range; a destroy
// takes the runner's objects, the policy and, forced, the workspace claim.
func TestAccKube_agent(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kube")
	cli := testutil.Docker(t)
	base := testutil.EnsureBusybox(t, cli)
	reg := testkube.Registry(t)
	id := "kq-helper"
	n := kubedeploy.NamesFor(id)
	wsDir := testkube.ReservedVolume(t, c, n.Claim, kubedeploy.DefaultWorkspaceSize)
	const soul, memory = "You are the quickstart helper. Be brief.", "Nothing remembered yet."
	cfg := func(network string, extra ...string) string {
		return kubeProvider(t, c, reg) + fmt.Sprintf(`
resource "meepa_isolation_image" "agents" {
  base_image      = %q
  pull            = "never"
  package_manager = "none"
  env_vars        = { MEEPA_STAGE = "kube" }
}

resource "meepa_agent" "helper" {
  agent_id                = %q
  force_destroy_workspace = true
  soul                    = %q
  memory                  = %q
  llm                     = { provider = "offline" }
  container_mode = {
    enabled      = true
    image        = meepa_isolation_image.agents.isolated_image
    memory_limit = "256m"
    network      = %q
  }
  %s
}
`, base, id, soul, memory, network, strings.Join(extra, "\n"))
	}
	var prevToken string
	ctx := context.Background()
	policy := n.Base + "-messages"
	nps := c.Clientset.NetworkingV1().NetworkPolicies(c.Namespace)
	apiHost, apiPort, _ := strings.Cut(testkube.APIServer(t, c), ":")
	send := func(s *terraform.State, text string) (string, error) {
		return sendToPod(t, c, s, "meepa_agent.helper", text)
	}
	resource.Test(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: withEcho(),
		CheckDestroy: func(*terraform.State) error {
			for what, err := range map[string]error{
				"Deployment":    getErr(c.Clientset.AppsV1().Deployments(c.Namespace).Get(ctx, n.Base, metav1.GetOptions{})),
				"Secret":        getErr(c.Clientset.CoreV1().Secrets(c.Namespace).Get(ctx, n.Base, metav1.GetOptions{})),
				"claim":         getErr(c.Clientset.CoreV1().PersistentVolumeClaims(c.Namespace).Get(ctx, n.Claim, metav1.GetOptions{})),
				"NetworkPolicy": getErr(nps.Get(ctx, policy, metav1.GetOptions{})),
			} {
				if !apierrors.IsNotFound(err) {
					return fmt.Errorf("%s after destroy: %v", what, err)
				}
			}
			return nil
		},
		Steps: []resource.TestStep{{
			Config: cfg("none"),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("meepa_isolation_image.agents", tfjsonpath.New("isolated_image"),
					knownvalue.StringRegexp(regexp.MustCompile("^"+regexp.QuoteMeta(reg+"/meepagateway-isolated:")))),
				statecheck.ExpectKnownValue("meepa_agent.helper", tfjsonpath.New("runner_status"), knownvalue.StringExact(agentspec.StatusRunning)),
				statecheck.ExpectKnownValue("meepa_agent.helper", tfjsonpath.New("workspace_path"),
					knownvalue.StringExact("pvc://"+c.Namespace+"/"+n.Claim)),
				statecheck.ExpectKnownValue("meepa_agent.helper", tfjsonpath.New("endpoint"),
					knownvalue.StringExact(fmt.Sprintf("http://%s.%s.svc:%d", n.Base, c.Namespace, kubedeploy.DefaultPort))),
				statecheck.ExpectKnownValue("meepa_agent.helper", tfjsonpath.New("soul"), knownvalue.StringExact(soul)),
			},
			Check: func(s *terraform.State) error {
				pol, err := nps.Get(ctx, policy, metav1.GetOptions{})
				if err != nil {
					return fmt.Errorf("message policy: %w", err)
				}
				want, err := metav1.ParseToLabelSelector(kube.AgentSelector(id))
				if err != nil {
					return err
				}
				if !maps.Equal(pol.Spec.PodSelector.MatchLabels, want.MatchLabels) || len(pol.Spec.PodSelector.MatchExpressions) != 0 ||
					len(pol.Spec.Egress)+len(pol.Spec.Ingress) != 0 || len(pol.Spec.PolicyTypes) != 2 {
					return fmt.Errorf("message policy %+v: want the agent's message pods (%s), both types and no rule", pol.Spec, kube.AgentSelector(id))
				}
				checks := []struct{ text, want string }{
					{"hello from the cluster", "offline: received"},
					{"!sh cat SOUL.md; echo; cat MEMORY.md", "exit 0\n" + soul + "\n" + memory},
					// nc's 1 is refused or timed out (127 would be no nc at all).
					{fmt.Sprintf("!sh nc -w 2 %s %s </dev/null 2>&1; echo \"== $? ==\"", apiHost, apiPort), "== 1 =="},
				}
				for _, ck := range checks {
					reply, err := send(s, ck.text)
					if err != nil {
						return err
					}
					if !strings.Contains(reply, ck.want) {
						return fmt.Errorf("%q: want %q in the reply:\n%s", ck.text, ck.want, reply)
					}
				}
				// The seed is in the claim, not only in what the pod saw.
				for file, want := range map[string]string{"SOUL.md": soul, "MEMORY.md": memory} {
					got, err := os.ReadFile(filepath.Join(wsDir, file))
					if err != nil || string(got) != want {
						return fmt.Errorf("%s in the workspace volume: %q %v, want %q", file, got, err, want)
					}
				}
				return nil
			},
		}, {
			// Import reads the agent back from its Secret and objects.
			Config:                               cfg("none"),
			ResourceName:                         "meepa_agent.helper",
			ImportState:                          true,
			ImportStateId:                        id,
			ImportStateVerify:                    true,
			ImportStateVerifyIdentifierAttribute: "agent_id",
			ImportStateVerifyIgnore:              []string{"llm.api_key"},
		}, {
			Config: cfg("bridge"),
			Check: func(s *terraform.State) error {
				pol, err := nps.Get(ctx, policy, metav1.GetOptions{})
				if err != nil || len(pol.Spec.Ingress) != 0 || len(pol.Spec.Egress) != 2 || pol.Spec.Egress[0].To[0].IPBlock == nil ||
					!slices.Contains(pol.Spec.Egress[0].To[0].IPBlock.Except, "169.254.0.0/16") {
					return fmt.Errorf("message policy after network \"bridge\": %+v %v", pol, err)
				}
				reply, err := send(s, fmt.Sprintf("!sh nc -w 2 %s %s </dev/null 2>&1; echo \"== $? ==\"", apiHost, apiPort))
				if err != nil || !strings.Contains(reply, "== 1 ==") {
					return fmt.Errorf("a bridge pod reached the API server: %q %v", reply, err)
				}
				prevToken = s.RootModule().Resources["meepa_agent.helper"].Primary.Attributes["token"]
				return nil
			},
		}, {
			// A new token_version: a new token in the Secret, a new runner
			// pod that takes only it.
			Config: cfg("bridge", "token_version = 1"),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meepa_agent.helper", plancheck.ResourceActionUpdate),
					plancheck.ExpectUnknownValue("meepa_agent.helper", tfjsonpath.New("token")),
				},
			},
			Check: func(s *terraform.State) error {
				a := s.RootModule().Resources["meepa_agent.helper"].Primary.Attributes
				if a["token"] == prevToken {
					return fmt.Errorf("token not rotated")
				}
				if _, code, err := sendToPodAs(t, c, a, prevToken, "old"); err != nil || code != http.StatusUnauthorized {
					return fmt.Errorf("the old token after rotation: %d %v, want 401", code, err)
				}
				_, err := send(s, "new")
				return err
			},
		}, {
			// A short-lived token from the agent's Secret is taken by its
			// runner pod.
			Config: cfg("bridge", "token_version = 1") + echoShortToken("meepa_agent.helper"),
			Check: func(s *terraform.State) error {
				short := s.RootModule().Resources["echo.t"].Primary.Attributes["data.token"]
				a := s.RootModule().Resources["meepa_agent.helper"].Primary.Attributes
				if r, code, err := sendToPodAs(t, c, a, short, "short"); err != nil || code != 200 {
					return fmt.Errorf("the short-lived token %q: %d %v %+v", short, code, err, r)
				}
				return nil
			},
		}},
	})
}

func getErr[T any](_ T, err error) error { return err }

// kubeImage is the isolation image of the cluster tests: busybox from the
// local daemon (base), nothing to install.
func kubeImage(base string) string {
	return fmt.Sprintf(`
resource "meepa_isolation_image" "agents" {
  base_image      = %q
  pull            = "never"
  package_manager = "none"
}
`, base)
}

// sendToPod posts a message to the agent at addr in state s through a
// port-forward to its runner pod (runner_container_id), with its token.
func sendToPod(t *testing.T, c *kube.Client, s *terraform.State, addr, text string) (string, error) {
	a := s.RootModule().Resources[addr].Primary.Attributes
	r, code, err := sendToPodAs(t, c, a, a["token"], text)
	if err != nil || code != 200 {
		return "", fmt.Errorf("%s %q through the runner pod: %d %+v %v", addr, text, code, r, err)
	}
	return r.Reply, nil
}

// sendToPodAs posts a message with token to the runner pod of the agent
// whose state attributes are a, through a port-forward.
func sendToPodAs(t *testing.T, c *kube.Client, a map[string]string, token, text string) (agent.Reply, int, error) {
	fwd := testkube.Forward(t, c, a["runner_container_id"], kubedeploy.DefaultPort)
	port, err := strconv.Atoi(fwd[strings.LastIndex(fwd, ":")+1:])
	if err != nil {
		return agent.Reply{}, 0, err
	}
	return sendTo(deploy.Listener{Port: port}, token, text)
}

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
	send := func(s *terraform.State, addr, text string) (string, error) { return sendToPod(t, c, s, addr, text) }
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
				// The escape probes from inside a message pod: its user,
				// capabilities, privileges, seccomp, root filesystem, and no
				// service-account token.
				escape := "!sh echo uid=$(id -u); grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' '; " +
					"touch /rootfs-probe 2>/dev/null && echo root=writable || echo root=readonly; " +
					"ls /var/run/secrets/kubernetes.io 2>/dev/null && echo token=present || echo token=absent"
				reach := fmt.Sprintf(`!sh for a in "%s %s" "%s %s"; do nc -w 3 $a </dev/null 2>&1; echo "== $a $?"; done`, apiHost, apiPort, proxyHost, proxyPort)
				checks := []struct {
					addr, text string
					want       []string
				}{
					{"meepa_agent.exec", "!sh echo $((6*7))", []string{"exit 0\n42"}},
					{"meepa_agent.exec", escape, []string{"exit 0", "uid=65534", "CapEff: 0000000000000000", "CapBnd: 0000000000000000",
						"NoNewPrivs: 1", "Seccomp: 2", "root=readonly", "token=absent"}},
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

// TestAccKube_topologyImport: a topology on the cluster is imported from
// its proxy Deployment with every attribute as applied, and a policy
// deleted out of band is drift that the next apply restores.
func TestAccKube_topologyImport(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kube-imp")
	base := testutil.EnsureBusybox(t, testutil.Docker(t))
	cfg := kubeProvider(t, c, testkube.Registry(t)) + kubeImage(base) + `
resource "threegate_network" "tg" {
  provider = meepa
  name     = "kimp"
  proxy = {
    image = meepa_isolation_image.agents.isolated_image
    allow = ["example.com:443", "192.0.2.10:443"]
    dns   = ["9.9.9.9"]
  }
}
`
	ctx := context.Background()
	resource.Test(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: cfg,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("threegate_network.tg", tfjsonpath.New("proxy_container_id"), knownvalue.StringExact("kimp-proxy")),
				statecheck.ExpectKnownValue("threegate_network.tg", tfjsonpath.New("networks"), knownvalue.MapExact(map[string]knownvalue.Check{})),
			},
		}, {
			ResourceName:                         "threegate_network.tg",
			ImportState:                          true,
			ImportStateId:                        "kimp",
			ImportStateVerify:                    true,
			ImportStateVerifyIdentifierAttribute: "name",
		}, {
			// A policy deleted out of band: the plan shows the drift.
			PreConfig: func() {
				if err := c.Clientset.NetworkingV1().NetworkPolicies(c.Namespace).Delete(ctx, "kimp-default-deny", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			Config:             cfg,
			PlanOnly:           true,
			ExpectNonEmptyPlan: true,
		}, {
			Config: cfg,
			Check: func(*terraform.State) error {
				_, err := c.Clientset.NetworkingV1().NetworkPolicies(c.Namespace).Get(ctx, "kimp-default-deny", metav1.GetOptions{})
				return err
			},
		}},
	})
}

// TestAccKube_modelRelay: a TOOL-EXEC agent on the cluster with a real
// OpenAI-compatible endpoint (the fake model, served at an address of the
// cluster's network that no node, pod or API server has). Its runner pod
// reaches the model only through the agent's own model policy, which apply
// made from llm.base_url; the loop in the message pod reaches it only
// through the runner's relay, and every call arrives with the key the
// runner holds; the shell the model asked for ran in the pod.
func TestAccKube_modelRelay(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kube-llm")
	base := testutil.EnsureBusybox(t, testutil.Docker(t))
	model := testutil.NewFakeModel(t, map[string]string{"count": "echo $((6*7))"})
	ln := testkube.ListenInCluster(t, "10.99.0.1")
	model.ServeOn(t, ln)
	id := "kl-exec"
	testkube.ReservedVolume(t, c, kubedeploy.NamesFor(id).Claim, kubedeploy.DefaultWorkspaceSize)
	const key = "sk-kube-relay-test"
	cfg := kubeProvider(t, c, testkube.Registry(t)) + kubeImage(base) + fmt.Sprintf(`
resource "threegate_network" "tg" {
  provider = meepa
  name     = "kllm"
  proxy    = { image = meepa_isolation_image.agents.isolated_image, allow = ["192.0.2.10:443"] }
}

resource "meepa_agent" "exec" {
  agent_id                = %q
  force_destroy_workspace = true
  llm = {
    provider = "openai"
    model    = "fake"
    base_url = "http://%s/v1"
    api_key  = %q
  }
  container_mode = { enabled = true, image = meepa_isolation_image.agents.isolated_image }
  threegate      = { network = threegate_network.tg.id, role = "tool_exec" }
}
`, id, ln.Addr().String(), key)
	ctx := context.Background()
	resource.Test(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: cfg,
			Check: func(s *terraform.State) error {
				list, err := c.Clientset.NetworkingV1().NetworkPolicies(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.ThreeGateLabelAgent + "=" + id})
				if err != nil || len(list.Items) != 1 || list.Items[0].Spec.Egress[0].To[0].IPBlock.CIDR != "10.99.0.1/32" {
					return fmt.Errorf("the agent's model policy: %+v %v", list, err)
				}
				reply, err := sendToPod(t, c, s, "meepa_agent.exec", "count")
				if err != nil {
					return err
				}
				if !strings.Contains(reply, "done") {
					return fmt.Errorf("reply %q, want the model's final answer", reply)
				}
				seen := model.Seen()
				if len(seen) < 2 {
					return fmt.Errorf("the model saw %d calls, want the tool call and the answer", len(seen))
				}
				for _, a := range seen {
					if a != "Bearer "+key {
						return fmt.Errorf("a model call came with %q, not the runner's key", a)
					}
				}
				return nil
			},
		}},
	})
}
