package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	dimage "github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
)

// Pull is the policy for fetching the base image.
type Pull string

const (
	// PullMissing pulls the base only when the daemon does not have it.
	PullMissing Pull = "missing"
	// PullAlways pulls the base before every build, even when a local copy
	// exists; between builds the local copy is what plans are made from.
	PullAlways Pull = "always"
	// PullNever uses only a local base; a missing base is an error.
	PullNever Pull = "never"
)

// Pulls lists every pull policy, default first.
var Pulls = []Pull{PullMissing, PullAlways, PullNever}

// Labels (under engine.LabelPrefix) that the images carry. Read builds the
// state back from them, so import needs nothing but the tag.
const (
	ComponentContainer = "container-image"
	ComponentIsolation = "isolation-image"

	LabelContentHash    = engine.LabelPrefix + "content-hash"
	LabelBaseImage      = engine.LabelPrefix + "base-image"
	LabelBaseImageID    = engine.LabelPrefix + "base-image-id"
	LabelPackages       = engine.LabelPrefix + "packages"
	LabelPackageManager = engine.LabelPrefix + "package-manager"
	LabelEnv            = engine.LabelPrefix + "env"
	LabelContainerImage = engine.LabelPrefix + "container-image"
	LabelRunnerSHA256   = engine.LabelPrefix + "runner-sha256"
	LabelVersion        = engine.LabelPrefix + "version"
	LabelTemplate       = engine.LabelPrefix + "template-version"
)

// ErrNotFound marks an image that is not on the daemon.
var ErrNotFound = errors.New("image not found")

// ErrInUse marks an image a container still uses.
var ErrInUse = errors.New("image is in use")

// Builder builds, reads and deletes images on one daemon.
type Builder struct {
	cli client.APIClient
}

// NewBuilder returns a Builder on cli.
func NewBuilder(cli client.APIClient) *Builder { return &Builder{cli: cli} }

// Names are the tags and Dockerfile that follow from a spec, a version and
// (when known) the base image's id: what a plan can show before building.
type Names struct {
	ContentHash string // "" when the base id is unknown
	Image       string // container tag, or the base reference without a container layer; "" when unknown
	Isolated    string // "" when unknown
	Dockerfile  string // "" without a container layer
}

// Plan derives the names. baseID may be empty (base not pulled yet): the
// hash, and the tags that depend on it, stay empty then.
func Plan(s Spec, version, baseID string) (Names, error) {
	var n Names
	if err := s.Validate(); err != nil {
		return n, err
	}
	if s.HasContainerLayer() {
		df, err := RenderContainer(s)
		if err != nil {
			return n, err
		}
		n.Dockerfile = df
	}
	if baseID != "" {
		n.ContentHash = ContentHash(baseID, s)
	}
	switch {
	case !s.HasContainerLayer():
		n.Image = s.BaseImage
		n.Isolated = IsolatedTag(version, s.BaseImage)
	case n.ContentHash != "":
		n.Image = ContainerTag(n.ContentHash)
		n.Isolated = IsolatedTag(version, n.Image)
	}
	return n, nil
}

// Request is one build of a container image and its isolation image.
type Request struct {
	Spec Spec
	Pull Pull
	// Version goes into the isolation tag (the provider's version; the
	// runner is released with it).
	Version string
	Runner  Binary
	// OnLog receives each line of pull and build output as it streams.
	OnLog func(line string)
	// KeepOld leaves an older image of ours that the isolation tag named
	// (keep_locally); by default it is removed once the new one runs.
	KeepOld bool
}

// Result is what a build made.
type Result struct {
	Names
	BaseImageID   string
	ImageID       string // the container image's id, or the base's without a container layer
	IsolatedID    string
	RunnerSHA256  string
	RunnerVersion string
	// Warnings are things that did not fail the build but the user should
	// see, such as an old image kept because a container still uses it.
	Warnings []string
}

// DaemonPlatform returns the daemon's OS and GOARCH.
func (b *Builder) DaemonPlatform(ctx context.Context) (osName, arch string, err error) {
	v, err := b.cli.ServerVersion(ctx)
	if err != nil {
		return "", "", fmt.Errorf("docker version: %w", err)
	}
	return v.Os, v.Arch, nil
}

// CheckRunner fails with ErrArchMismatch unless the runner runs on the
// daemon (a Linux daemon of the binary's architecture).
func (b *Builder) CheckRunner(ctx context.Context, bin Binary) error {
	osName, arch, err := b.DaemonPlatform(ctx)
	if err != nil {
		return err
	}
	if osName != "linux" {
		return fmt.Errorf("the Docker daemon runs %s containers; isolation images need a Linux daemon", osName)
	}
	return bin.CheckArch(arch)
}

// BaseID returns the local id of ref, or "" (and no error) when the daemon
// does not have it.
func (b *Builder) BaseID(ctx context.Context, ref string) (string, error) {
	ins, err := b.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("inspect base image %s: %w", ref, err)
	}
	return ins.ID, nil
}

// Build makes the container image (unless there is no container layer, or
// an image with the same content hash is already there) and the isolation
// image, then runs `agent-runner version` inside it once: that proves the
// image runs and gives the version without executing a foreign binary on
// this host. An older image that the isolation tag pointed at is removed.
func (b *Builder) Build(ctx context.Context, req Request) (Result, error) {
	var res Result
	logf := req.OnLog
	if logf == nil {
		logf = func(string) {}
	}
	if err := req.Spec.Validate(); err != nil {
		return res, err
	}
	if err := b.CheckRunner(ctx, req.Runner); err != nil {
		return res, err
	}
	baseID, err := b.ensureBase(ctx, req.Spec.BaseImage, req.Pull, logf)
	if err != nil {
		return res, err
	}
	names, err := Plan(req.Spec, req.Version, baseID)
	if err != nil {
		return res, err
	}
	res.Names, res.BaseImageID, res.RunnerSHA256 = names, baseID, req.Runner.SHA256

	// What this build made is removed again when a later step fails, so a
	// failed apply leaves nothing behind that no state knows about.
	var made []Target
	var oldID string // the managed image the isolation tag named before
	undo := func(err error) error {
		cctx := context.WithoutCancel(ctx)
		for i := len(made) - 1; i >= 0; i-- {
			if derr := b.Delete(cctx, made[i]); derr != nil {
				err = errors.Join(err, fmt.Errorf("cleaning up after the failed build: %w", derr))
			}
		}
		if oldID != "" {
			if terr := b.cli.ImageTag(cctx, oldID, names.Isolated); terr != nil {
				err = errors.Join(err, fmt.Errorf("restoring %s: %w", names.Isolated, terr))
			}
		}
		return err
	}

	res.ImageID = baseID
	if req.Spec.HasContainerLayer() {
		existed, _ := b.BaseID(ctx, names.Image)
		id, err := b.containerImage(ctx, req.Spec, names, baseID, logf)
		if err != nil {
			return res, err
		}
		res.ImageID = id
		if existed != id {
			made = append(made, Target{Container: names.Image, ContainerID: id})
		}
	}

	if old, err := b.cli.ImageInspect(ctx, names.Isolated); err == nil && old.Config != nil &&
		old.Config.Labels[engine.LabelManagedBy] == engine.ManagedByValue {
		oldID = old.ID
	}
	labels := isolationLabels(req, names, baseID)
	res.IsolatedID, err = b.build(ctx, names.Isolated, RenderIsolation(names.Image), req.Runner.Path, labels, logf)
	if err != nil {
		return res, undo(fmt.Errorf("build isolation image %s: %w", names.Isolated, err))
	}
	if res.IsolatedID != oldID {
		made = append(made, Target{Isolated: names.Isolated, IsolatedID: res.IsolatedID})
	}
	res.RunnerVersion, err = b.RunnerVersion(ctx, names.Isolated, req.Runner)
	if err != nil {
		return res, undo(err)
	}
	if oldID != "" && oldID != res.IsolatedID && !req.KeepOld {
		// A new runner binary (or template) for the same tag: the old image
		// is now untagged and would linger as <none> forever.
		if err := b.removeID(ctx, oldID); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("the previous isolation image %s was kept: %v", shortID(oldID), err))
		}
	}
	return res, nil
}

func (b *Builder) containerImage(ctx context.Context, s Spec, n Names, baseID string, logf func(string)) (string, error) {
	if ins, err := b.cli.ImageInspect(ctx, n.Image); err == nil && ins.Config != nil &&
		ins.Config.Labels[LabelContentHash] == n.ContentHash {
		logf(fmt.Sprintf("container image %s is up to date (%s)", n.Image, shortID(ins.ID)))
		return ins.ID, nil
	}
	labels := engine.Labels(ComponentContainer, map[string]string{
		LabelContentHash: n.ContentHash,
		LabelBaseImage:   s.BaseImage,
		LabelBaseImageID: baseID,
		LabelTemplate:    TemplateVersion,
	})
	id, err := b.build(ctx, n.Image, n.Dockerfile, "", labels, logf)
	if err != nil {
		return "", fmt.Errorf("build container image %s: %w", n.Image, err)
	}
	return id, nil
}

func isolationLabels(req Request, n Names, baseID string) map[string]string {
	pkgs, _ := json.Marshal(req.Spec.sortedPackages())
	env := "{}"
	if len(req.Spec.Env) > 0 {
		e, _ := json.Marshal(req.Spec.Env) // keys sorted by encoding/json
		env = string(e)
	}
	return engine.Labels(ComponentIsolation, map[string]string{
		LabelContentHash:    n.ContentHash,
		LabelContainerImage: n.Image,
		LabelBaseImage:      req.Spec.BaseImage,
		LabelBaseImageID:    baseID,
		LabelPackages:       string(pkgs),
		LabelPackageManager: string(req.Spec.manager()),
		LabelEnv:            env,
		LabelRunnerSHA256:   req.Runner.SHA256,
		LabelVersion:        req.Version,
		LabelTemplate:       TemplateVersion,
	})
}

// ensureBase makes sure the base is on the daemon per the pull policy and
// returns its id.
func (b *Builder) ensureBase(ctx context.Context, ref string, pull Pull, logf func(string)) (string, error) {
	id, err := b.BaseID(ctx, ref)
	if err != nil {
		return "", err
	}
	switch {
	case pull == PullNever && id == "":
		return "", fmt.Errorf("base image %s is not on the Docker daemon and pull is %q: build or load it first "+
			"(docker build / docker load), or set pull to %q", ref, PullNever, PullMissing)
	case pull == PullNever, pull == PullMissing && id != "":
		return id, nil
	}
	logf("pulling " + ref)
	rc, err := b.cli.ImagePull(ctx, ref, dimage.PullOptions{})
	if err == nil {
		_, err = readStream(rc, logf)
		err = errors.Join(err, rc.Close())
	}
	if err != nil {
		return "", fmt.Errorf("pull base image %s: %w (is its registry reachable? A locally built base needs pull = %q)", ref, err, PullNever)
	}
	id, err = b.BaseID(ctx, ref)
	if err != nil {
		return "", err
	}
	if id == "" {
		return "", fmt.Errorf("pull base image %s: the daemon reports success but has no such image", ref)
	}
	return id, nil
}

// build runs one legacy-builder build of dockerfile (with runnerPath as
// "agent-runner" in its context, when set) and returns the image id. The
// labels go into the Dockerfile as one LABEL instruction. On failure the
// error carries the last lines of the build log.
func (b *Builder) build(ctx context.Context, tag, dockerfile, runnerPath string, labels map[string]string, logf func(string)) (string, error) {
	line, err := labelInstruction(labels)
	if err != nil {
		return "", err
	}
	tarball, err := buildContext(dockerfile+line, runnerPath)
	if err != nil {
		return "", err
	}
	// Closing the read end stops the writer when the daemon stops reading.
	defer func() { _ = tarball.Close() }()
	resp, err := b.cli.ImageBuild(ctx, tarball, build.ImageBuildOptions{
		Tags:        []string{tag},
		Remove:      true,
		ForceRemove: true,
		PullParent:  false,
		Version:     build.BuilderV1,
	})
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }() // read-only stream
	id, err := readStream(resp.Body, logf)
	if err != nil {
		return "", err
	}
	// The legacy builder reports the id in an aux message; the tag is the
	// fallback and also proves the tag was set.
	ins, ierr := b.cli.ImageInspect(ctx, tag)
	if ierr != nil {
		return "", fmt.Errorf("inspect built image: %w", ierr)
	}
	if id != "" && id != ins.ID {
		return "", fmt.Errorf("built image %s but %s points at %s (a concurrent build?)", shortID(id), tag, shortID(ins.ID))
	}
	return ins.ID, nil
}

// labelInstruction renders labels as one Dockerfile LABEL instruction, keys
// sorted, each value quoted as ENV's are (the same word parser reads both);
// "" for none. The classic builder makes a step, and an image config, per
// instruction, so one instruction for all of them is one step.
func labelInstruction(labels map[string]string) (string, error) {
	if len(labels) == 0 {
		return "", nil
	}
	var b strings.Builder
	b.WriteString("LABEL")
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		if !labelKey.MatchString(k) {
			return "", fmt.Errorf("label key %q is not one this project makes", k)
		}
		if err := ValidateEnvValue(v); err != nil {
			return "", fmt.Errorf("label %s: %w", k, err)
		}
		if i > 0 {
			b.WriteString(" \\\n     ")
		}
		fmt.Fprintf(&b, " %s=%s", k, quoteEnvValue(v))
	}
	b.WriteString("\n")
	return b.String(), nil
}

// labelKey is the form of every label key this project sets.
var labelKey = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*$`)

// buildContext streams the tar build context: the Dockerfile and the
// runner (read from runnerPath, when set) as "agent-runner", mode 0755.
// The tar is written into a pipe as the daemon reads it, so memory stays
// a copy buffer whatever the runner's size. The runner is opened here, so
// a missing one fails before the build starts; the caller closes the
// reader.
func buildContext(dockerfile, runnerPath string) (io.ReadCloser, error) {
	var runner *os.File
	var size int64
	if runnerPath != "" {
		f, err := os.Open(runnerPath)
		if err != nil {
			return nil, fmt.Errorf("read agent-runner: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			_ = f.Close() // read-only
			return nil, fmt.Errorf("read agent-runner: %w", err)
		}
		runner, size = f, fi.Size()
	}
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeContext(pw, dockerfile, runner, size))
	}()
	return pr, nil
}

func writeContext(w io.Writer, dockerfile string, runner *os.File, size int64) error {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), Typeflag: tar.TypeReg}); err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	if _, err := io.WriteString(tw, dockerfile); err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	if runner != nil {
		defer func() { _ = runner.Close() }() // read-only
		if err := tw.WriteHeader(&tar.Header{Name: "agent-runner", Mode: 0o755, Size: size, Typeflag: tar.TypeReg}); err != nil {
			return fmt.Errorf("build context: %w", err)
		}
		// CopyN: a runner that grew while it was sent must not overrun its
		// header; one that shrank fails the build.
		if _, err := io.CopyN(tw, runner, size); err != nil {
			return fmt.Errorf("read agent-runner: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	return nil
}

// RunnerVersion runs `agent-runner version` once in ref (no network,
// read-only, no capabilities) and returns the version it prints.
func (b *Builder) RunnerVersion(ctx context.Context, ref string, bin Binary) (string, error) {
	out, code, err := b.run(ctx, ref, []string{RunnerPath, "version"})
	if err != nil {
		return "", fmt.Errorf("run agent-runner version in %s: %w", ref, err)
	}
	if code != 0 {
		hint := ""
		if bin.Interp != "" {
			hint = fmt.Sprintf(" (agent-runner is dynamically linked and needs %s; build it with CGO_ENABLED=0)", bin.Interp)
		}
		return "", fmt.Errorf("agent-runner version in %s exited %d%s: %s", ref, code, hint, strings.TrimSpace(out))
	}
	v, err := ParseRunnerVersion(out)
	if err != nil {
		return "", fmt.Errorf("agent-runner version in %s: %w", ref, err)
	}
	return v, nil
}

// ParseRunnerVersion takes the version from `agent-runner version` output,
// "agent-runner <version> (commit <c>, <os>/<arch>)".
func ParseRunnerVersion(out string) (string, error) {
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "agent-runner" {
		return "", fmt.Errorf("unexpected output %q", strings.TrimSpace(out))
	}
	return f[1], nil
}

// run runs cmd in a throw-away, locked-down container and returns its
// combined output and exit code.
func (b *Builder) run(ctx context.Context, ref string, cmd []string) (string, int, error) {
	created, err := b.cli.ContainerCreate(ctx,
		&container.Config{Image: ref, Cmd: cmd, Entrypoint: []string{}, Labels: engine.Labels("image-check", nil)},
		&container.HostConfig{
			NetworkMode:    "none",
			ReadonlyRootfs: true,
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges"},
		}, &network.NetworkingConfig{}, nil, "")
	if err != nil {
		return "", 0, fmt.Errorf("container create: %w", err)
	}
	defer func() {
		// A fresh context: the container must go even when ctx is done.
		_ = b.cli.ContainerRemove(context.WithoutCancel(ctx), created.ID, container.RemoveOptions{Force: true})
	}()
	waitC, errC := b.cli.ContainerWait(ctx, created.ID, container.WaitConditionNextExit)
	if err := b.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return "", 0, fmt.Errorf("container start: %w", err)
	}
	var code int
	select {
	case w := <-waitC:
		if w.Error != nil {
			return "", 0, fmt.Errorf("container wait: %s", w.Error.Message)
		}
		code = int(w.StatusCode)
	case err := <-errC:
		return "", 0, fmt.Errorf("container wait: %w", err)
	}
	logs, err := b.cli.ContainerLogs(ctx, created.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "", code, fmt.Errorf("container logs: %w", err)
	}
	defer func() { _ = logs.Close() }() // read-only stream
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, logs); err != nil {
		return "", code, fmt.Errorf("container logs: %w", err)
	}
	return out.String(), code, nil
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
