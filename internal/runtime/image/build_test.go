package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	dimage "github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// rtVersion keeps this package's isolation tags apart from the provider
// tests' on the shared daemon.
const rtVersion = "0.0.0-rt"

// rtBase tags the busybox test image under a name of this test's own.
func rtBase(t *testing.T, cli *client.Client, name string) string {
	t.Helper()
	testutil.EnsureBusybox(t, cli)
	// The pid keeps concurrent runs (two worktrees, one daemon) apart.
	ref := fmt.Sprintf("meepa-test/image-rt-%s-%d:latest", name, os.Getpid())
	if err := cli.ImageTag(context.Background(), testutil.BusyboxImage, ref); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove image "+ref, func() error {
		_, err := cli.ImageRemove(context.Background(), ref, imageRemoveOpts)
		return testutil.Gone(err)
	})
	return ref
}

func exists(t *testing.T, cli *client.Client, ref string) bool {
	t.Helper()
	_, err := cli.ImageInspect(context.Background(), ref)
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func runner(t *testing.T) Binary {
	t.Helper()
	b, err := InspectBinary(testutil.RunnerBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Env values that would break out of a naive ENV line come back from the
// built image byte for byte, and the build log streams through OnLog.
func TestBuildEnvRoundTrip(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	ctx := context.Background()
	env := map[string]string{
		"QUOTES":   `a"b'c`,
		"DOLLARS":  `$HOME ${PATH} $(touch /pwned)`,
		"BACKTICK": "`touch /pwned`",
		"BACKSL":   `C:\path\ ends with \`,
		"BREAKOUT": `x" && RUN touch /pwned && echo "`,
		"JSONISH":  `{"k":["v"]}`,
		"TAB":      "a\tb",
		"EMPTY":    "",
	}
	spec := Spec{BaseImage: rtBase(t, cli, "env"), Manager: ManagerNone, Env: env}
	var logged []string
	b := NewBuilder(cli)
	res, err := b.Build(ctx, Request{Spec: spec, Pull: PullNever, Version: rtVersion, Runner: runner(t),
		OnLog: func(l string) { logged = append(logged, l) }})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "delete built images", func() error {
		return b.Delete(ctx, Target{res.Isolated, res.IsolatedID, res.Image, res.ImageID})
	})

	ins, err := cli.ImageInspect(ctx, res.IsolatedID)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range env {
		if !slices.Contains(ins.Config.Env, k+"="+v) {
			t.Errorf("image env lacks %s=%q; has %q", k, v, ins.Config.Env)
		}
	}
	if !slices.Contains(ins.Config.Env, "HOME=/workspace") || ins.Config.WorkingDir != "/workspace" {
		t.Errorf("isolation layer env/workdir: %q %q", ins.Config.Env, ins.Config.WorkingDir)
	}
	// No RUN step was smuggled in: the container image has exactly the
	// base's layers (ENV adds none), and nothing made /pwned.
	base, _ := cli.ImageInspect(ctx, spec.BaseImage)
	img, _ := cli.ImageInspect(ctx, res.ImageID)
	if len(img.RootFS.Layers) != len(base.RootFS.Layers) {
		t.Errorf("container image has %d layers, base %d: something ran", len(img.RootFS.Layers), len(base.RootFS.Layers))
	}
	out, code, err := b.run(ctx, res.IsolatedID, []string{"sh", "-c", "test ! -e /pwned && echo \"$BREAKOUT\""})
	if err != nil || code != 0 || out != env["BREAKOUT"]+"\n" {
		t.Errorf("in the image: %d %v %q", code, err, out)
	}
	if !slices.ContainsFunc(logged, func(l string) bool { return strings.HasPrefix(l, "Step 1/") }) {
		t.Errorf("no build output reached OnLog: %q", logged)
	}
	if res.RunnerVersion == "" || res.RunnerSHA256 != runner(t).SHA256 {
		t.Errorf("runner version %q sha %q", res.RunnerVersion, res.RunnerSHA256)
	}
}

// An image a container uses is not removed: Delete says which container,
// and succeeds once it is gone. The base is never touched.
func TestDeleteInUse(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	ctx := context.Background()
	spec := Spec{BaseImage: rtBase(t, cli, "inuse"), Packages: nil}
	b := NewBuilder(cli)
	res, err := b.Build(ctx, Request{Spec: spec, Pull: PullNever, Version: rtVersion, Runner: runner(t)})
	if err != nil {
		t.Fatal(err)
	}
	target := Target{Isolated: res.Isolated, IsolatedID: res.IsolatedID}
	testutil.Cleanup(t, "delete built images", func() error { return b.Delete(ctx, target) })

	name := fmt.Sprintf("meepa-test-image-inuse-%d", os.Getpid())
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: res.Isolated, Cmd: []string{"true"}}, nil, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	removed := false
	testutil.Cleanup(t, "remove container", func() error {
		if removed {
			return nil
		}
		return testutil.Gone(cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}))
	})

	err = b.Delete(ctx, target)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), name) {
		t.Fatalf("Delete of an image in use: %v; want ErrInUse naming %s", err, name)
	}
	t.Log(err)
	if !exists(t, cli, res.Isolated) {
		t.Fatal("the image in use was removed anyway")
	}
	if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	removed = true
	if err := b.Delete(ctx, target); err != nil {
		t.Fatal(err)
	}
	if exists(t, cli, res.Isolated) || exists(t, cli, res.IsolatedID) {
		t.Error("image still there after Delete")
	}
	if !exists(t, cli, spec.BaseImage) {
		t.Error("Delete removed the base image")
	}
	if err := b.Delete(ctx, target); err != nil {
		t.Errorf("Delete of what is already gone: %v", err)
	}
}

// A runner that cannot run in the base (a dynamically linked binary in a
// busybox image) fails the build with a hint, and leaves no image behind.
func TestBuildRunnerThatCannotRun(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	ctx := context.Background()
	dyn, err := InspectBinary("/bin/ls")
	if err != nil || dyn.Interp == "" {
		t.Skipf("/bin/ls is not a dynamically linked ELF here: %v", err)
	}
	spec := Spec{BaseImage: rtBase(t, cli, "dyn"), Manager: ManagerNone, Env: map[string]string{"X": "1"}}
	names, _ := Plan(spec, rtVersion, "")
	_, err = NewBuilder(cli).Build(ctx, Request{Spec: spec, Pull: PullNever, Version: rtVersion, Runner: dyn})
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("Build with a dynamic runner: %v", err)
	}
	t.Log(err)
	baseID, _ := NewBuilder(cli).BaseID(ctx, spec.BaseImage)
	names, _ = Plan(spec, rtVersion, baseID)
	for _, ref := range []string{names.Isolated, names.Image} {
		if exists(t, cli, ref) {
			t.Errorf("failed build left %s behind", ref)
		}
	}
}

var imageRemoveOpts = dimage.RemoveOptions{}
