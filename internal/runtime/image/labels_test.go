package image

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/build"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

func TestLabelInstruction(t *testing.T) {
	got, err := labelInstruction(map[string]string{"io.meepa.b": `x"$y\`, "io.meepa.a": ""})
	if want := "LABEL io.meepa.a=\"\" \\\n      io.meepa.b=\"x\\\"\\$y\\\\\"\n"; err != nil || got != want {
		t.Errorf("labelInstruction = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []map[string]string{{"io.meepa.a": "x\ny"}, {"io.meepa.a b": "x"}, {"K=v": "x"}} {
		if _, err := labelInstruction(bad); err == nil {
			t.Errorf("labelInstruction(%q) accepted", bad)
		}
	}
}

// The labels an isolation image carries are the same, byte for byte, as
// those of one the previous release built (the labels passed as build
// options), and Read finds an image of that release as it finds a new one;
// the new build has one label step.
func TestLabelsAsThePreviousRelease(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	ctx := context.Background()
	env := map[string]string{"QUOTES": `a"b'c`, "DOLLARS": `$HOME ${PATH}`, "BACKSL": `C:\p\ `, "JSONISH": `{"k":["v"]}`, "TAB": "a\tb"}
	spec := Spec{BaseImage: rtBase(t, cli, "labels"), Manager: ManagerNone, Env: env}
	bin := runner(t)
	b := NewBuilder(cli)
	res, err := b.Build(ctx, Request{Spec: spec, Pull: PullNever, Version: rtVersion, Runner: bin})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove images of "+res.Isolated, func() error {
		return b.Delete(context.Background(), Target{Container: res.Image, ContainerID: res.ImageID, Isolated: res.Isolated, IsolatedID: res.IsolatedID})
	})
	newObs, err := b.Read(ctx, res.Isolated)
	if err != nil {
		t.Fatal(err)
	}

	// The previous release's build: the same Dockerfile, labels as options.
	oldTag := fmt.Sprintf("meepa-test/isolated-old-%d:latest", os.Getpid())
	tarball, err := buildContext(RenderIsolation(res.Image), bin.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tarball.Close() }()
	resp, err := cli.ImageBuild(ctx, tarball, build.ImageBuildOptions{Tags: []string{oldTag}, Remove: true, ForceRemove: true,
		Labels: isolationLabels(Request{Spec: spec, Version: rtVersion, Runner: bin}, res.Names, res.BaseImageID), Version: build.BuilderV1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = readStream(resp.Body, func(string) {})
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove image "+oldTag, func() error {
		_, err := cli.ImageRemove(context.Background(), oldTag, imageRemoveOpts)
		return testutil.Gone(err)
	})
	oldObs, err := b.Read(ctx, oldTag)
	if err != nil {
		t.Fatal(err)
	}
	newIns, _ := cli.ImageInspect(ctx, res.Isolated)
	oldIns, _ := cli.ImageInspect(ctx, oldTag)
	if !maps.Equal(newIns.Config.Labels, oldIns.Config.Labels) {
		t.Errorf("labels differ from the previous release's:\n new %q\n old %q", newIns.Config.Labels, oldIns.Config.Labels)
	}
	newObs.IsolatedID, oldObs.IsolatedID = "", ""
	if fmt.Sprint(newObs) != fmt.Sprint(oldObs) || !oldObs.Managed || oldObs.ContentHash != res.ContentHash {
		t.Errorf("Read of the previous release's image\n %+v\nwant\n %+v", oldObs, newObs)
	}
	newSteps, oldSteps := layerSteps(t, res.Isolated), layerSteps(t, oldTag)
	t.Logf("isolation layer steps: %d now, %d as the previous release built it", len(newSteps), len(oldSteps))
	labels := 0
	for _, s := range newSteps {
		if strings.Contains(s, "LABEL") {
			labels++
		}
	}
	if labels != 1 {
		t.Errorf("%d LABEL steps in the isolation layer, want 1:\n%s", labels, strings.Join(newSteps, "\n"))
	}
}

// layerSteps are the history entries of ref above the COPY of the runner:
// the isolation layer's steps after it.
func layerSteps(t *testing.T, ref string) []string {
	t.Helper()
	hist, err := testutil.Docker(t).ImageHistory(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, h := range hist {
		if strings.Contains(h.CreatedBy, "COPY") {
			break
		}
		steps = append(steps, h.CreatedBy)
	}
	return steps
}
