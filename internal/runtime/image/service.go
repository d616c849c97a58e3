package image

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/logging"
)

// ErrRunnerUnusable marks an agent-runner binary that cannot go into an
// isolation image on this daemon: not found, unreadable, or built for
// another architecture (then ErrArchMismatch too).
var ErrRunnerUnusable = errors.New("unusable agent-runner binary")

// ErrForeign marks an image at an isolation tag that this provider did not
// build, found where one of ours was expected (import).
var ErrForeign = errors.New("not an isolation image built by this provider")

// RunnerLookup returns the path of the agent-runner binary for a Linux
// daemon of the given GOARCH.
type RunnerLookup func(arch string) (string, error)

// Service is the isolation image's whole lifecycle on one daemon: what a
// plan can know before building, the build, the read-back that finds
// changes made out of band, and removal. It has no Terraform types, so the
// provider, the bench and tests drive the same code.
type Service struct {
	b       *Builder
	version string
	runner  RunnerLookup
	log     logging.Logger
}

// NewService returns the service for cli. version goes into isolation tags;
// runner finds the agent-runner binary to layer in; log may be nil.
func NewService(cli client.APIClient, version string, runner RunnerLookup, log logging.Logger) *Service {
	return &Service{b: NewBuilder(cli), version: version, runner: runner, log: logging.Or(log)}
}

// State is the computed half of an isolation image: what is kept between
// runs to find drift and to remove the images again.
type State struct {
	Isolated      string // the isolation tag
	IsolatedID    string
	Image         string // the container tag, or the base reference without a container layer
	ImageID       string
	ContentHash   string // "" when the images at the tags were changed out of band
	RunnerVersion string
	RunnerSHA256  string
	Dockerfile    string // "" without a container layer
}

// Planned is what a plan shows. In State, Dockerfile and RunnerSHA256 are
// always known; every other empty field is known only after the build.
type Planned struct {
	State State
	// Replace names the inputs (schema attribute names) whose change makes
	// a new image. With a prior image and no reason, the image stands as
	// it is and State is the prior one.
	Replace []string
}

// Prior is an image that exists: the inputs it was built from, and its
// state.
type Prior struct {
	Spec  Spec
	State State
}

// Plan derives what a build of spec would make, from the daemon's view of
// the base image and the runner binary, without building anything.
func (s *Service) Plan(ctx context.Context, spec Spec, pull Pull, prior *Prior) (Planned, error) {
	if err := spec.Validate(); err != nil {
		return Planned{}, err
	}
	bin, err := s.Runner(ctx)
	if err != nil {
		return Planned{}, err
	}
	baseID, err := s.b.BaseID(ctx, spec.BaseImage)
	if err != nil {
		return Planned{}, err
	}
	if prior == nil && pull == PullAlways {
		baseID = "" // the pull at apply may bring another image
	}
	names, err := Plan(spec, s.version, baseID)
	if err != nil {
		return Planned{}, err
	}
	if prior != nil {
		why := replaceReasons(spec, *prior, names, bin, baseID)
		if len(why) == 0 {
			return Planned{State: prior.State}, nil
		}
		s.log.Info("isolation image will be replaced", "tag", prior.State.Isolated, "reasons", why)
		return Planned{State: planned(spec, names, bin, baseID), Replace: why}, nil
	}
	return Planned{State: planned(spec, names, bin, baseID)}, nil
}

func planned(spec Spec, n Names, bin Binary, baseID string) State {
	st := State{
		Isolated:     n.Isolated,
		Image:        n.Image,
		ContentHash:  n.ContentHash,
		RunnerSHA256: bin.SHA256,
		Dockerfile:   n.Dockerfile,
	}
	if !spec.HasContainerLayer() {
		st.ImageID = baseID
	}
	return st
}

// replaceReasons names the inputs whose change makes a new image.
func replaceReasons(spec Spec, prior Prior, n Names, bin Binary, baseID string) []string {
	var why []string
	old := prior.Spec
	if spec.BaseImage != old.BaseImage {
		why = append(why, "base_image")
	}
	if !slices.Equal(spec.sortedPackages(), old.sortedPackages()) {
		why = append(why, "packages")
	}
	if spec.Manager != old.Manager {
		why = append(why, "package_manager")
	}
	if !maps.Equal(spec.Env, old.Env) {
		why = append(why, "env_vars")
	}
	// With the base gone from the daemon the images in state still stand;
	// only a base that is there and different forces a rebuild. An empty
	// hash in state is Read's mark for images changed out of band.
	if (baseID != "" && n.ContentHash != prior.State.ContentHash) || (baseID == "" && prior.State.ContentHash == "") {
		why = append(why, "content_hash")
	}
	if bin.SHA256 != prior.State.RunnerSHA256 {
		why = append(why, "runner_sha256")
	}
	if n.Isolated != "" && n.Isolated != prior.State.Isolated {
		why = append(why, "isolated_image")
	}
	return why
}

// Runner resolves the agent-runner binary for the daemon's architecture,
// checks that it runs there, and hashes it. Its errors are
// ErrRunnerUnusable.
func (s *Service) Runner(ctx context.Context) (Binary, error) {
	osName, arch, err := s.b.DaemonPlatform(ctx)
	if err != nil {
		return Binary{}, err
	}
	if osName != "linux" {
		return Binary{}, fmt.Errorf("%w: the Docker daemon runs %s containers; isolation images need a Linux daemon", ErrRunnerUnusable, osName)
	}
	p, err := s.runner(arch)
	if err != nil {
		return Binary{}, fmt.Errorf("%w: %w", ErrRunnerUnusable, err)
	}
	bin, err := InspectBinary(p)
	if err != nil {
		return Binary{}, fmt.Errorf("%w: %w", ErrRunnerUnusable, err)
	}
	if err := bin.CheckArch(arch); err != nil {
		return Binary{}, fmt.Errorf("%w: %w", ErrRunnerUnusable, err)
	}
	return bin, nil
}

// Create builds the container image and the isolation image for spec.
// Warnings are things the user should see that did not fail the build.
func (s *Service) Create(ctx context.Context, spec Spec, pull Pull, keepOld bool) (State, []string, error) {
	bin, err := s.Runner(ctx)
	if err != nil {
		return State{}, nil, err
	}
	s.log.Info("building isolation image", "base_image", spec.BaseImage, "runner", bin.Path)
	res, err := s.b.Build(ctx, Request{
		Spec:    spec,
		Pull:    pull,
		Version: s.version,
		Runner:  bin,
		OnLog:   func(line string) { s.log.Info("docker build output", "base_image", spec.BaseImage, "line", line) },
		KeepOld: keepOld,
	})
	if err != nil {
		return State{}, nil, err
	}
	s.log.Debug("isolation image built", "tag", res.Isolated, "id", res.IsolatedID, "image", res.Image, "content_hash", res.ContentHash)
	return State{
		Isolated:      res.Isolated,
		IsolatedID:    res.IsolatedID,
		Image:         res.Image,
		ImageID:       res.ImageID,
		ContentHash:   res.ContentHash,
		RunnerVersion: res.RunnerVersion,
		RunnerSHA256:  res.RunnerSHA256,
		Dockerfile:    res.Dockerfile,
	}, res.Warnings, nil
}

// Observation is an isolation image read back from the daemon.
type Observation struct {
	// Gone: the isolation image, or the container image it layers onto,
	// is no longer there; the next plan builds it again.
	Gone bool
	// Foreign: the tag names an image this provider did not build. State
	// keeps the prior ids (removal still has to remove ours) with an empty
	// ContentHash, so the next plan replaces it.
	Foreign bool
	// Spec is what the image was built from, by its labels.
	Spec  Spec
	State State
}

// Read reads the isolation image at prior.Isolated back as it is. An import
// (prior.IsolatedID empty) of a missing image is ErrNotFound and of a foreign
// one ErrForeign; otherwise those are reported in the Observation.
func (s *Service) Read(ctx context.Context, prior State) (Observation, error) {
	tag := prior.Isolated
	importing := prior.IsolatedID == ""
	obs, err := s.b.Read(ctx, tag)
	switch {
	case errors.Is(err, ErrNotFound) && importing:
		return Observation{}, fmt.Errorf("there is no image %s on the Docker daemon to import: %w", tag, err)
	case errors.Is(err, ErrNotFound):
		s.log.Info("isolation image is gone", "tag", tag)
		return Observation{Gone: true}, nil
	case err != nil:
		return Observation{}, err
	case importing && !obs.Managed:
		return Observation{}, fmt.Errorf("%s: %w (it has no io.meepa. labels); import takes the isolated_image tag of a meepa_isolation_image", tag, ErrForeign)
	case !obs.Managed:
		s.log.Warn("isolation tag points at an image this provider did not build", "tag", tag, "id", obs.IsolatedID)
		st := prior
		st.ContentHash = ""
		return Observation{Foreign: true, State: st}, nil
	}
	return s.observed(ctx, tag, prior, obs)
}

func (s *Service) observed(ctx context.Context, tag string, prior State, obs Observed) (Observation, error) {
	st := State{
		Isolated:      tag,
		IsolatedID:    obs.IsolatedID,
		Image:         obs.Image,
		ImageID:       obs.BaseImageID,
		ContentHash:   obs.ContentHash,
		RunnerVersion: prior.RunnerVersion,
		RunnerSHA256:  obs.RunnerSHA256,
	}
	if obs.Spec.HasContainerLayer() {
		if obs.ImageID == "" {
			s.log.Info("container image is gone", "tag", obs.Image, "isolated", tag)
			return Observation{Gone: true}, nil
		}
		st.ImageID = obs.ImageID
		if obs.ImageContentHash != obs.ContentHash {
			st.ContentHash = "" // the container tag was moved out of band
		}
	}
	if names, err := Plan(obs.Spec, s.version, ""); err == nil {
		st.Dockerfile = names.Dockerfile
	}
	if st.RunnerVersion == "" {
		// Only on import: it costs a container run.
		v, err := s.b.RunnerVersion(ctx, obs.IsolatedID, Binary{})
		if err != nil {
			return Observation{}, err
		}
		st.RunnerVersion = v
	}
	return Observation{Spec: obs.Spec, State: st}, nil
}

// Delete removes the isolation image and the container image under it
// (never a base image). An image a container still uses is ErrInUse and
// nothing is removed; images already gone are done.
func (s *Service) Delete(ctx context.Context, spec Spec, st State) error {
	t := Target{Isolated: st.Isolated, IsolatedID: st.IsolatedID}
	if spec.HasContainerLayer() {
		t.Container, t.ContainerID = st.Image, st.ImageID
	}
	if err := s.b.Delete(ctx, t); err != nil {
		return fmt.Errorf("remove %s: %w", st.Isolated, err)
	}
	s.log.Debug("isolation image removed", "tag", st.Isolated, "id", st.IsolatedID, "container_image", t.Container)
	return nil
}
