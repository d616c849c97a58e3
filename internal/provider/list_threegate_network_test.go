package provider

import (
	"context"
	"os/exec"
	"regexp"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/querycheck"
	"github.com/hashicorp/terraform-plugin-testing/querycheck/queryfilter"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccThreegateNetwork_list: `terraform query` lists the topology
// applied here with its identity and, with include_resource, its proxy
// image; a network, a firewall guard container and an iptables chain left
// without their proxy are listed only as an orphan, with how to remove
// them.
func TestAccThreegateNetwork_list(t *testing.T) {
	testutil.RequireDocker(t)
	f := newTGFixture(t)
	cli := testutil.Docker(t)
	orphan := f.name + "-orphan"
	net := orphan + "-llmnet"
	if _, err := cli.NetworkCreate(context.Background(), net, network.CreateOptions{Internal: true,
		Labels: engine.Labels("network", map[string]string{"threegate": orphan, "threegate.kind": "llmnet"})}); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove network "+net, func() error { return cli.NetworkRemove(context.Background(), net) })
	guardName := orphan + "-guard"
	if _, err := cli.ContainerCreate(context.Background(), &container.Config{Image: f.image, Cmd: []string{"true"},
		Labels: engine.Labels("guard", map[string]string{"threegate": orphan})}, nil, nil, nil, guardName); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove container "+guardName, func() error {
		return cli.ContainerRemove(context.Background(), guardName, container.RemoveOptions{Force: true})
	})
	chain := firewall.ForwardChain(orphan)
	if out, err := exec.Command("iptables", "-N", chain).CombinedOutput(); err != nil {
		t.Fatalf("iptables -N %s: %v: %s", chain, err, out)
	}
	testutil.Cleanup(t, "remove chain "+chain, func() error { return exec.Command("iptables", "-X", chain).Run() })
	ident := func(name string) map[string]knownvalue.Check {
		return map[string]knownvalue.Check{"name": knownvalue.StringExact(name), "backend": knownvalue.StringExact("docker")}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_14_0)},
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             f.checkDestroyed(t),
		Steps: []resource.TestStep{
			{Config: f.config("")},
			{
				Query: true,
				Config: `
list "threegate_network" "all" {
  provider         = meepa
  include_resource = true
}
list "threegate_network" "orphans" {
  provider = meepa
  config {
    orphans = true
  }
}
`,
				QueryResultChecks: []querycheck.QueryResultCheck{
					querycheck.ExpectIdentity("threegate_network.all", ident(f.name)),
					querycheck.ExpectNoIdentity("threegate_network.all", ident(orphan)),
					querycheck.ExpectResourceKnownValues("threegate_network.all", queryfilter.ByResourceIdentity(ident(f.name)), []querycheck.KnownValueCheck{
						{Path: tfjsonpath.New("proxy").AtMapKey("image"), KnownValue: knownvalue.StringExact(f.image)},
					}),
					querycheck.ExpectIdentity("threegate_network.orphans", ident(orphan)),
					querycheck.ExpectNoIdentity("threegate_network.orphans", ident(f.name)),
					querycheck.ExpectResourceDisplayName("threegate_network.orphans", queryfilter.ByResourceIdentity(ident(orphan)),
						knownvalue.StringRegexp(regexp.MustCompile(`^orphan topology `+orphan+`: its firewall guard container `+guardName+`; its networks `+net+
							`; its iptables chains `+chain+` left without its proxy container .*apply a threegate_network named "`+orphan+`" and destroy it`))),
				},
			},
		},
	})
}
