package provider

import (
	"context"
	"os"
	"regexp"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/querycheck"
	"github.com/hashicorp/terraform-plugin-testing/querycheck/queryfilter"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccAgent_list: `terraform query` lists the agents under the
// provider's state_dir with their identities (the one applied here, not
// the orphan), and with orphans = true only the runner container left
// without its config, saying how to remove it. An agent of another
// state_dir is in neither list.
func TestAccAgent_list(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	stateDir, otherDir := t.TempDir(), t.TempDir()
	id, orphan, foreign := "tf-acc-list-"+runID, "tf-acc-list-orphan-"+runID, "tf-acc-list-foreign-"+runID
	cleanupAgent(t, cli, id)
	// What a runner left when its config went: a runner container whose
	// config directory, under this state_dir, is empty; and one of another
	// state_dir.
	for agent, dir := range map[string]string{orphan: stateDir, foreign: otherDir} {
		layout := deploy.LayoutFor(dir, agent)
		if err := os.MkdirAll(layout.Dir, 0o700); err != nil {
			t.Fatal(err)
		}
		cleanupAgent(t, cli, agent)
		_, err := cli.ContainerCreate(context.Background(), &container.Config{
			Image: image, Entrypoint: []string{"agent-runner"},
			Labels: engine.Labels(deploy.ComponentRunner, map[string]string{sandbox.LabelAgent: agent}),
		}, &container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeBind, Source: layout.Dir, Target: layout.Dir, ReadOnly: true}}},
			nil, nil, deploy.ContainerName(agent))
		if err != nil {
			t.Fatal(err)
		}
	}
	ident := func(agent string) map[string]knownvalue.Check {
		return map[string]knownvalue.Check{"agent_id": knownvalue.StringExact(agent), "backend": knownvalue.StringExact("docker")}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_14_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			{Config: agentAccConfig(stateDir, id, image, "512m", "")},
			{
				Query: true,
				// The step's .tf (the provider block with state_dir) stays.
				Config: `
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
					querycheck.ExpectLength("meepa_agent.all", 1),
					querycheck.ExpectIdentity("meepa_agent.all", ident(id)),
					querycheck.ExpectResourceDisplayName("meepa_agent.all", queryfilter.ByResourceIdentity(ident(id)),
						knownvalue.StringExact("agent "+id+" (runner running)")),
					querycheck.ExpectLength("meepa_agent.orphans", 1),
					querycheck.ExpectIdentity("meepa_agent.orphans", ident(orphan)),
					querycheck.ExpectResourceDisplayName("meepa_agent.orphans", queryfilter.ByResourceIdentity(ident(orphan)),
						knownvalue.StringRegexp(regexp.MustCompile(`^orphan agent `+orphan+`: its runner container meepa-runner-`+orphan+` is left.*docker rm -f`))),
				},
			},
		},
	})
}
