package kube

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/docker/docker/client"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// savedImages answers ImageSave with a docker-save archive of the image
// at the tag asked for, as the daemon would, and counts the saves.
type savedImages struct {
	images map[string]v1.Image
	saves  []string
}

func (s *savedImages) ImageSave(_ context.Context, refs []string, _ ...client.ImageSaveOption) (io.ReadCloser, error) {
	if len(refs) != 1 {
		return nil, fmt.Errorf("save of %d images", len(refs))
	}
	img, ok := s.images[refs[0]]
	if !ok {
		return nil, fmt.Errorf("no such image: %s", refs[0])
	}
	s.saves = append(s.saves, refs[0])
	tag, err := name.NewTag(refs[0])
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		return nil, err
	}
	return io.NopCloser(&buf), nil
}

// TestPushIsolation: the container image and the isolation image go to
// the registry by their own tags, each pinned by the digest of what was
// saved; without a container layer only the isolation image goes.
func TestPushIsolation(t *testing.T) {
	ctx := context.Background()
	reg := RegistryConfig{Address: startRegistry(t), Username: testUser, Password: testPassword, Insecure: true}
	container, err := random.Image(2048, 2)
	testutil.Must(t, err)
	isolated, err := random.Image(2048, 3)
	testutil.Must(t, err)
	st := image.State{
		Image:    image.ContainerTag("0123456789ab"),
		Isolated: image.IsolatedTag("0.1.0", image.ContainerTag("0123456789ab")),
	}
	saver := &savedImages{images: map[string]v1.Image{st.Image: container, st.Isolated: isolated}}
	p, err := NewImagePusher(saver, reg, &lines{})
	testutil.Must(t, err)

	refs, err := p.PushIsolation(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		got   *PushedImage
		local string
		img   v1.Image
	}{{refs.Container, st.Image, container}, {&refs.Isolated, st.Isolated, isolated}} {
		d, _ := c.img.Digest()
		if c.got == nil || c.got.Digest != d.String() || c.got.Tag != reg.Address+"/"+c.local || !c.got.Uploaded {
			t.Fatalf("%s pushed as %+v; want %s/%s at %s", c.local, c.got, reg.Address, c.local, d)
		}
		checkPulled(t, reg, c.got.Ref, c.img)
	}

	// A base image straight under the isolation image is not pushed.
	st.Image = "ghcr.io/bogpad/meepagateway-sandbox:latest"
	saver.saves = nil
	refs, err = p.PushIsolation(ctx, st)
	if err != nil || refs.Container != nil || refs.Isolated.Uploaded {
		t.Fatalf("without a container layer: %+v, %v; want the isolation image only, already there", refs, err)
	}
	if strings.Join(saver.saves, ",") != st.Isolated {
		t.Errorf("saved %v, want only %s", saver.saves, st.Isolated)
	}
}
