package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
)

// unreachableKubeconfig is a kubeconfig whose server nothing answers:
// every check below must happen at plan, before the cluster is asked.
func unreachableKubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:1
contexts:
- name: c
  context:
    cluster: c
    user: u
current-context: c
users:
- name: u
  user:
    token: t
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKube_refusedAtPlan: what a cluster cannot honour is an error on its
// attribute at plan, with no cluster and no daemon needed.
func TestKube_refusedAtPlan(t *testing.T) {
	kc := unreachableKubeconfig(t)
	provider := func(extra string) string {
		return fmt.Sprintf(`
provider "meepa" {
  kubernetes = {
    config_path = %q
    namespace   = "agents"
  }
  registry = { address = "registry.example:5000/meepa" }
  %s
}
`, kc, extra)
	}
	agent := func(body string) string {
		return `
resource "meepa_agent" "a" {
  agent_id = "kube-plan"
  llm      = { provider = "offline" }
` + body + "\n}\n"
	}
	container := `container_mode = { enabled = true, image = "img:1" }`
	for name, tc := range map[string]struct {
		config string
		want   string
	}{
		"docker_host too": {provider(`docker_host = "unix:///var/run/docker.sock"`) + agent(container),
			`kubernetes and docker_host both say where agents run`},
		"registry with a scheme": {fmt.Sprintf(`
provider "meepa" {
  kubernetes = { config_path = %q }
  registry   = { address = "https://registry.example" }
}
`, kc) + agent(container), `registry\.address: "https://registry.example" has a scheme`},
		"registry token and user": {fmt.Sprintf(`
provider "meepa" {
  kubernetes = { config_path = %q }
  registry   = { address = "registry.example", token = "x", username = "u", password = "p" }
}
`, kc) + agent(container), `give either a token or a username and password`},
		"namespace": {fmt.Sprintf(`
provider "meepa" {
  kubernetes = { config_path = %q, namespace = "Not_A_Label" }
}
`, kc) + agent(container), `"Not_A_Label" is not a namespace name`},
		"host mode": {provider("") + agent(`runner = { image = "img:1" }`), `container_mode.enabled: on Kubernetes every message runs in a fresh Pod`},
		"listen":    {provider("") + agent(container+"\n  runner = { listen = \"127.0.0.1:9000\" }"), `runner.listen: on Kubernetes the runner listens`},
		"external":  {provider("") + agent(container+"\n  runner = { deployment = \"external\" }"), `runner.deployment: on Kubernetes the runner is always a Deployment`},
		"image without registry": {fmt.Sprintf(`
provider "meepa" {
  kubernetes = { config_path = %q }
}

resource "meepa_isolation_image" "i" {
  base_image = "busybox:1"
}
`, kc), `give the provider a registry block`},
	} {
		t.Run(name, func(t *testing.T) {
			resource.UnitTest(t, resource.TestCase{
				TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
				ProtoV6ProviderFactories: testAccProviders,
				Steps: []resource.TestStep{{
					Config: tc.config, PlanOnly: true, ExpectError: regexp.MustCompile(tc.want),
				}},
			})
		})
	}
}

// TestKube_quickstartHelperPlans: the quickstart's helper agent (soul,
// memory, manage_soul, network "none") plans on a cluster as it is, with no
// cluster reached.
func TestKube_quickstartHelperPlans(t *testing.T) {
	kc := unreachableKubeconfig(t)
	resource.UnitTest(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
provider "meepa" {
  kubernetes = { config_path = %q }
  registry   = { address = "registry.example:5000/meepa" }
}

resource "meepa_agent" "helper" {
  agent_id                = "qs-helper"
  force_destroy_workspace = true
  soul                    = "You are the quickstart helper. Be brief."
  memory                  = "Nothing remembered yet."
  manage_soul             = true
  llm                     = { provider = "offline" }
  container_mode = {
    enabled      = true
    image        = "registry.example:5000/meepa/meepagateway-isolated:1"
    memory_limit = "256m"
    network      = "none"
  }
}
`, kc),
			PlanOnly: true, ExpectNonEmptyPlan: true,
		}},
	})
}
