package provider

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/querycheck"
	"github.com/hashicorp/terraform-plugin-testing/querycheck/queryfilter"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
	"github.com/bogpad/terraform-provider-meepa/internal/testimage"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccIsolationImage_list: `terraform query` lists the isolation image
// applied here with its identity and, with include_resource, its base
// image; a container image no isolation image is built on, and an
// isolation image whose container image is gone, are listed only as
// orphans, with how to remove them.
func TestAccIsolationImage_list(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	base := ensureBareBase(t, cli)
	tag := image.IsolatedTag("0.1.0-test", base)
	lonely := image.ContainerTag("tfacc" + runID)
	stray := image.IsolatedRepo + ":tf-acc-gone-" + runID
	build := func(tag, component string, extra map[string]string) {
		if err := testimage.BuildLabelled(context.Background(), cli, tag, "FROM "+testutil.BusyboxImage+"\n", nil,
			engine.Labels(component, extra)); err != nil {
			t.Fatal(err)
		}
	}
	build(lonely, image.ComponentContainer, nil)
	testutil.Cleanup(t, "remove image "+lonely, func() error { return removeImage(cli, lonely) })
	build(stray, image.ComponentIsolation, map[string]string{image.LabelContainerImage: image.ContainerTag("gone" + runID)})
	testutil.Cleanup(t, "remove image "+stray, func() error { return removeImage(cli, stray) })
	ident := func(tag string) map[string]knownvalue.Check {
		return map[string]knownvalue.Check{"isolated_image": knownvalue.StringExact(tag)}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   needsActions,
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			{Config: fmt.Sprintf("resource \"meepa_isolation_image\" \"test\" {\n  base_image = %q\n}\n", base)},
			{
				Query: true,
				Config: `
list "meepa_isolation_image" "all" {
  provider         = meepa
  include_resource = true
}
list "meepa_isolation_image" "orphans" {
  provider = meepa
  config {
    orphans = true
  }
}
`,
				QueryResultChecks: []querycheck.QueryResultCheck{
					querycheck.ExpectIdentity("meepa_isolation_image.all", ident(tag)),
					querycheck.ExpectNoIdentity("meepa_isolation_image.all", ident(lonely)),
					querycheck.ExpectNoIdentity("meepa_isolation_image.all", ident(stray)),
					querycheck.ExpectResourceKnownValues("meepa_isolation_image.all", queryfilter.ByResourceIdentity(ident(tag)), []querycheck.KnownValueCheck{
						{Path: tfjsonpath.New("base_image"), KnownValue: knownvalue.StringExact(base)},
						{Path: tfjsonpath.New("image"), KnownValue: knownvalue.StringExact(base)},
					}),
					querycheck.ExpectIdentity("meepa_isolation_image.orphans", ident(lonely)),
					querycheck.ExpectIdentity("meepa_isolation_image.orphans", ident(stray)),
					querycheck.ExpectNoIdentity("meepa_isolation_image.orphans", ident(tag)),
					querycheck.ExpectResourceDisplayName("meepa_isolation_image.orphans", queryfilter.ByResourceIdentity(ident(lonely)),
						knownvalue.StringRegexp(regexp.MustCompile(`^orphan image `+regexp.QuoteMeta(lonely)+`: no isolation image is built on it: remove it \(docker image rm `+regexp.QuoteMeta(lonely)+`\)$`))),
					querycheck.ExpectResourceDisplayName("meepa_isolation_image.orphans", queryfilter.ByResourceIdentity(ident(stray)),
						knownvalue.StringRegexp(regexp.MustCompile(`^orphan image `+regexp.QuoteMeta(stray)+`: its container image meepa-sandbox:gone`+runID+` is gone`))),
				},
			},
		},
	})
}
