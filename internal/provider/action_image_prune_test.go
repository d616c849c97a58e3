package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
	"github.com/bogpad/terraform-provider-meepa/internal/testimage"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// pruneTrigger is a meepa_image_prune action with the given config body,
// run after terraform_data.prune (which follows the body) is created or
// changes.
func pruneTrigger(body string) string {
	return fmt.Sprintf(`
action "meepa_image_prune" "p" {
  config {
%s
  }
}

resource "terraform_data" "prune" {
  input = %q
  lifecycle {
    action_trigger {
      events  = [after_create, after_update]
      actions = [action.meepa_image_prune.p]
    }
  }
}
`, body, body)
}

// TestAccImagePruneAction: without confirm the action removes nothing;
// with confirm = true it removes the provider's images no container uses,
// except what keep names and the container image a kept isolation image
// is built on; a bad match fails at plan. match confines it to this
// test's images (the daemon is shared).
func TestAccImagePruneAction(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	testutil.EnsureBusybox(t, cli)
	ctx := context.Background()
	under := image.ContainerTag("tfaccprune" + runID + "a")
	lone := image.ContainerTag("tfaccprune" + runID + "b")
	kept := image.IsolatedRepo + ":tf-acc-prune-" + runID + "-keep"
	gone := image.IsolatedRepo + ":tf-acc-prune-" + runID + "-gone"
	inUse := image.IsolatedRepo + ":tf-acc-prune-" + runID + "-used"
	build := func(tag, component, on string) {
		// Each its own image: the tag goes into the Dockerfile, so no two
		// builds share an id.
		if err := testimage.BuildLabelled(ctx, cli, tag, "FROM "+testutil.BusyboxImage+"\nENV T="+strings.ReplaceAll(tag, ":", "_")+"\n", nil,
			engine.Labels(component, map[string]string{image.LabelContainerImage: on})); err != nil {
			t.Fatal(err)
		}
		testutil.Cleanup(t, "remove image "+tag, func() error { return removeImage(cli, tag) })
	}
	build(under, image.ComponentContainer, "")
	build(lone, image.ComponentContainer, "")
	build(kept, image.ComponentIsolation, under)
	build(gone, image.ComponentIsolation, lone)
	build(inUse, image.ComponentIsolation, "")
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: inUse, Cmd: []string{"true"}, Labels: engine.Labels("test", nil)}, nil, nil, nil, "tf-acc-prune-"+runID)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove container "+c.ID, func() error {
		return testutil.Gone(cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}))
	})
	match := `    match = "(tfaccprune|tf-acc-prune-)` + runID + `"
    keep  = ["` + kept + `"]`
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   needsActions,
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			{
				Config: pruneTrigger(match),
				Check:  imagesThere(cli, map[string]bool{under: true, lone: true, kept: true, gone: true, inUse: true}),
			},
			{
				Config: pruneTrigger(match + "\n    confirm = true"),
				Check:  imagesThere(cli, map[string]bool{under: true, lone: false, kept: true, gone: false, inUse: true}),
			},
			{
				Config:      pruneTrigger(`    match = "("`),
				PlanOnly:    true,
				ExpectError: errRE(`Invalid Regular Expression`),
			},
			{
				// A good configuration last (destroy plans it); a dry run
				// again, which leaves what the confirmed run kept.
				Config: pruneTrigger(match + "\n    # again"),
				Check:  imagesThere(cli, map[string]bool{under: true, lone: false, kept: true, gone: false, inUse: true}),
			},
		},
	})
}

// imagesThere checks which of the tags the daemon has (true) or not.
func imagesThere(cli *client.Client, want map[string]bool) resource.TestCheckFunc {
	return func(*terraform.State) error {
		var errs []error
		for tag, there := range want {
			_, err := cli.ImageInspect(context.Background(), tag)
			switch {
			case err != nil && !cerrdefs.IsNotFound(err):
				errs = append(errs, err)
			case there && err != nil:
				errs = append(errs, fmt.Errorf("image %s was removed", tag))
			case !there && err == nil:
				errs = append(errs, fmt.Errorf("image %s is still there", tag))
			}
		}
		return errors.Join(errs...)
	}
}
