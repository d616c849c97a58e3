package kube

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"testing"

	"github.com/docker/docker/api/types/image"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/bogpad/terraform-provider-meepa/internal/testimage"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestPushFromDockerDaemon builds a two-layer image from scratch on the
// real daemon, pushes it with docker save and go-containerregistry, pulls
// it back by digest and checks it against the daemon's own view: the
// layers' diff ids, and the file in a layer byte for byte. A second push
// of a fresh save gives the same digest and writes nothing.
func TestPushFromDockerDaemon(t *testing.T) {
	testutil.RequireDocker(t)
	ctx := context.Background()
	cli := testutil.Docker(t)
	payload := make([]byte, 64<<10)
	_, _ = rand.Read(payload)
	tag := "tf-acc-push/tiny:" + hex.EncodeToString(payload[:6])
	testutil.Must(t, testimage.Build(ctx, cli, tag, "FROM scratch\nCOPY payload /payload\nCOPY second /etc/second\n",
		map[string][]byte{"payload": payload, "second": []byte("second layer\n")}))
	testutil.Cleanup(t, "remove "+tag, func() error {
		_, err := cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true})
		return testutil.Gone(err)
	})
	local, err := cli.ImageInspect(ctx, tag)
	testutil.Must(t, err)

	reg := RegistryConfig{Address: startRegistry(t), Username: testUser, Password: testPassword, Insecure: true}
	p, err := NewImagePusher(cli, reg, nil)
	testutil.Must(t, err)
	rec := &recorder{next: remote.DefaultTransport}
	p.WithTransport(rec)
	got, err := p.Push(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Uploaded || got.Tag != reg.Address+"/"+tag {
		t.Fatalf("push = %+v, want an upload to %s/%s", got, reg.Address, tag)
	}

	ref, err := name.NewDigest(got.Ref, reg.nameOptions()...)
	testutil.Must(t, err)
	pulled, err := remote.Image(ref, remote.WithAuth(reg.authenticator()))
	testutil.Must(t, err)
	if d, err := pulled.Digest(); err != nil || d.String() != got.Digest {
		t.Fatalf("pulled digest %v, %v; pushed %s", d, err, got.Digest)
	}
	cfg, err := pulled.ConfigFile()
	testutil.Must(t, err)
	if len(cfg.RootFS.DiffIDs) != len(local.RootFS.Layers) || len(local.RootFS.Layers) != 2 {
		t.Fatalf("pulled diff ids %v; the daemon has %v", cfg.RootFS.DiffIDs, local.RootFS.Layers)
	}
	for i, l := range local.RootFS.Layers {
		if cfg.RootFS.DiffIDs[i].String() != l {
			t.Errorf("layer %d: pulled diff id %s, daemon %s", i, cfg.RootFS.DiffIDs[i], l)
		}
	}
	layers, err := pulled.Layers()
	testutil.Must(t, err)
	checkLayerContent(t, layers[0], cfg.RootFS.DiffIDs[0], "payload", payload)

	rec.reset()
	again, err := p.Push(ctx, tag)
	if err != nil || again.Uploaded || again.Digest != got.Digest {
		t.Fatalf("second push = %+v, %v; want digest %s and no upload", again, err, got.Digest)
	}
	if w := rec.writes(); len(w) != 0 {
		t.Errorf("second push sent %v", w)
	}
}

// checkLayerContent reads a pulled layer uncompressed: its sha256 is its
// diff id and it holds file with the given bytes.
func checkLayerContent(t *testing.T, l v1.Layer, diffID v1.Hash, file string, want []byte) {
	t.Helper()
	rc, err := l.Uncompressed()
	testutil.Must(t, err)
	defer func() { _ = rc.Close() }() // read-only stream
	h := sha256.New()
	tr := tar.NewReader(io.TeeReader(rc, h))
	found := false
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		testutil.Must(t, err)
		if hdr.Name == file {
			b, err := io.ReadAll(tr)
			testutil.Must(t, err)
			found = bytes.Equal(b, want)
		}
	}
	_, _ = io.Copy(h, rc) // tar padding after the last entry
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID.String() {
		t.Errorf("layer content hashes to %s, diff id %s", got, diffID)
	}
	if !found {
		t.Errorf("layer has no %s with the bytes built into it", file)
	}
}
