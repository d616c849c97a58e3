package testimage

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/docker/docker/client"
)

// LoadScript is the test cluster's image import script, relative to the
// repository root (see scripts/k8s-up.sh).
var LoadScript = filepath.Join("scripts", "k8s", "load-image.sh")

// ImportToCluster copies an image from the local Docker daemon into the
// test cluster's containerd (`docker save` piped into the import script),
// where pods use it with imagePullPolicy Never: the cluster has no registry.
func ImportToCluster(ctx context.Context, cli client.APIClient, repoRoot, tag string) error {
	rc, err := cli.ImageSave(ctx, []string{tag})
	if err != nil {
		return fmt.Errorf("import %s into the cluster: docker save: %w", tag, err)
	}
	defer func() { _ = rc.Close() }() // read to its end by the import
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, LoadScript), "-")
	cmd.Stdin = rc
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("import %s into the cluster: %w\n%s", tag, err, out)
	}
	return nil
}
