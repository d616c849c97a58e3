package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/docker/docker/client"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/logging"
)

// ImageSaver is the part of the Docker client the pusher uses: `docker
// save` of one image.
type ImageSaver interface {
	ImageSave(ctx context.Context, images []string, opts ...client.ImageSaveOption) (io.ReadCloser, error)
}

// ImagePusher copies images the provider built on the Docker daemon to a
// registry the cluster pulls from.
type ImagePusher struct {
	docker ImageSaver
	reg    RegistryConfig
	base   http.RoundTripper
	log    logging.Logger
}

// NewImagePusher checks reg and returns a pusher from docker to it. log may
// be nil; it never receives a credential.
func NewImagePusher(docker ImageSaver, reg RegistryConfig, log logging.Logger) (*ImagePusher, error) {
	if err := reg.Validate(); err != nil {
		return nil, err
	}
	return &ImagePusher{docker: docker, reg: reg, log: logging.Or(log)}, nil
}

// WithTransport sets the HTTP transport under the pusher's own rules (TLS
// only unless insecure; a test's CA). Nil: go-containerregistry's default.
func (p *ImagePusher) WithTransport(t http.RoundTripper) *ImagePusher {
	p.base = t
	return p
}

// PushedImage is an image as the registry has it.
type PushedImage struct {
	// Ref pins the image by digest, <address>/<repo>@sha256:…: what a pod
	// names, so that a moved tag cannot swap the image under it.
	Ref string
	// Tag is the same image by its tag, <address>/<repo>:<tag>.
	Tag string
	// Digest is the manifest digest, sha256:….
	Digest string
	// Uploaded is false when the registry had the digest already; then
	// nothing was sent but, if the tag pointed elsewhere, the manifest.
	Uploaded bool
}

// Push copies the local image ref (repo:tag, as the image service tags
// them) to the registry under the same repository path and tag and
// returns its digest. It sends nothing when the registry already has that
// digest at that tag.
func (p *ImagePusher) Push(ctx context.Context, ref string) (PushedImage, error) {
	dst, err := p.reg.remoteTag(ref)
	if err != nil {
		return PushedImage{}, err
	}
	tmp, err := os.CreateTemp("", "meepa-push-*.tar")
	if err != nil {
		return PushedImage{}, fmt.Errorf("push %s: %w", ref, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // a temp file of ours; nothing to report
	if err := p.save(ctx, ref, tmp); err != nil {
		return PushedImage{}, err
	}
	img, err := tarball.ImageFromPath(tmp.Name(), nil)
	if err != nil {
		return PushedImage{}, fmt.Errorf("read saved image %s: %w", ref, err)
	}
	return p.PushImage(ctx, img, dst)
}

// save writes `docker save ref` to f and closes it.
func (p *ImagePusher) save(ctx context.Context, ref string, f *os.File) error {
	rc, err := p.docker.ImageSave(ctx, []string{ref})
	if err != nil {
		return errors.Join(fmt.Errorf("docker save %s: %w", ref, err), f.Close())
	}
	_, err = io.Copy(f, rc)
	err = errors.Join(err, rc.Close(), f.Close())
	if err != nil {
		return fmt.Errorf("docker save %s: %w", ref, err)
	}
	return nil
}

// PushImage copies img to dst unless the registry has its digest there:
// the digest present and the tag on it is a no-op, the digest present
// under another tag (or none) costs one manifest upload, anything else a
// push, in which go-containerregistry skips the layers the repository has.
func (p *ImagePusher) PushImage(ctx context.Context, img v1.Image, dst name.Tag) (PushedImage, error) {
	d, err := img.Digest()
	if err != nil {
		return PushedImage{}, fmt.Errorf("digest of the image for %s: %w", dst, err)
	}
	out := PushedImage{Ref: dst.Digest(d.String()).String(), Tag: dst.String(), Digest: d.String()}
	opts := p.remoteOptions(ctx)
	has, err := present(dst.Digest(d.String()), opts)
	if err != nil {
		return PushedImage{}, err
	}
	if has {
		at, err := remote.Head(dst, opts...)
		if err == nil && at.Digest == d {
			p.log.Debug("registry has the image", "tag", out.Tag, "digest", out.Digest)
			return out, nil
		}
		if err != nil && !isNotFound(err) {
			return PushedImage{}, fmt.Errorf("check %s: %w", dst, err)
		}
		if err := remote.Tag(dst, img, opts...); err != nil {
			return PushedImage{}, fmt.Errorf("tag %s: %w", dst, err)
		}
		p.log.Info("registry had the image; tag set", "tag", out.Tag, "digest", out.Digest)
		return out, nil
	}
	p.log.Info("pushing image", "tag", out.Tag, "digest", out.Digest, "registry", p.reg.String())
	if err := remote.Write(dst, img, opts...); err != nil {
		return PushedImage{}, fmt.Errorf("push %s: %w", dst, err)
	}
	out.Uploaded = true
	return out, nil
}

func (p *ImagePusher) remoteOptions(ctx context.Context) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuth(p.reg.authenticator()),
		remote.WithTransport(p.reg.transport(p.base)),
	}
}

// present asks the registry (HEAD) whether it has the manifest at ref.
func present(ref name.Digest, opts []remote.Option) (bool, error) {
	_, err := remote.Head(ref, opts...)
	switch {
	case err == nil:
		return true, nil
	case isNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("check %s: %w", ref, err)
}

func isNotFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// IsolationRefs are an isolation image's references in the registry.
type IsolationRefs struct {
	// Isolated is the isolation image: what the agents' pods run.
	Isolated PushedImage
	// Container is the container image (meepa-sandbox:<content hash>) it
	// layers onto, or nil when there is none: a base image is not ours to
	// push, and its layers travel inside the isolation image.
	Container *PushedImage
}

// PushIsolation pushes what the image service built for st: the container
// image, when there is one, and the isolation image.
func (p *ImagePusher) PushIsolation(ctx context.Context, st image.State) (IsolationRefs, error) {
	var out IsolationRefs
	if repo, _, ok := strings.Cut(st.Image, ":"); ok && repo == image.ContainerRepo {
		c, err := p.Push(ctx, st.Image)
		if err != nil {
			return IsolationRefs{}, err
		}
		out.Container = &c
	}
	iso, err := p.Push(ctx, st.Isolated)
	if err != nil {
		return IsolationRefs{}, err
	}
	out.Isolated = iso
	return out, nil
}
