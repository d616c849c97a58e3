package kube

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Published is where the local image ref (repo:tag) goes in the registry:
// <address>/<repo>:<tag>, what a pod names to pull it.
func (c RegistryConfig) Published(local string) (string, error) {
	if _, err := c.remoteTag(local); err != nil {
		return "", err
	}
	return c.Address + "/" + local, nil
}

// Local is the daemon's ref of a Published one; ok is false for a ref
// outside this registry.
func (c RegistryConfig) Local(published string) (string, bool) {
	return strings.CutPrefix(published, c.Address+"/")
}

// Has reports whether the registry holds the local image's tag.
func (p *ImagePusher) Has(ctx context.Context, local string) (bool, error) {
	dst, err := p.reg.remoteTag(local)
	if err != nil {
		return false, err
	}
	_, err = remote.Head(dst, p.remoteOptions(ctx)...)
	switch {
	case err == nil:
		return true, nil
	case isNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("check %s in %s: %w", dst, p.reg.String(), err)
}
