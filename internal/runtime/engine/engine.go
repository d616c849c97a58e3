// Package engine connects to the Docker Engine and holds the ownership labels
// that every object this project creates carries.
package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/docker/docker/client"
	"github.com/docker/go-connections/tlsconfig"
)

// LabelPrefix is the reserved label namespace of this project. Every container,
// network and image it makes carries LabelManagedBy, and sweeps of leftovers
// select on it.
const (
	LabelPrefix    = "io.meepa."
	LabelManagedBy = LabelPrefix + "managed-by"
	LabelComponent = LabelPrefix + "component"
	ManagedByValue = "terraform-provider-meepa"
)

// Labels returns the ownership labels for an object of the given component
// (e.g. "isolation-image", "runner", "message", "proxy", "network") merged with
// extra. Keys of extra without the prefix get it.
func Labels(component string, extra map[string]string) map[string]string {
	l := map[string]string{LabelManagedBy: ManagedByValue, LabelComponent: component}
	for k, v := range extra {
		if !strings.HasPrefix(k, LabelPrefix) {
			k = LabelPrefix + k
		}
		l[k] = v
	}
	return l
}

// Options say how to reach the daemon. The zero value means what the Docker
// CLI would do: DOCKER_HOST if set, else the local unix socket, and TLS from
// DOCKER_CERT_PATH / DOCKER_TLS_VERIFY.
type Options struct {
	// Host is a daemon address such as unix:///var/run/docker.sock or
	// tcp://10.0.0.2:2376. Empty: DOCKER_HOST, else the default socket.
	Host string
	// CertPath is a directory with ca.pem, cert.pem and key.pem. Empty:
	// DOCKER_CERT_PATH.
	CertPath string
	// TLSVerify verifies the daemon's certificate. Nil: DOCKER_TLS_VERIFY
	// is non-empty.
	TLSVerify *bool
}

// resolved fills the empty fields from the environment.
func (o Options) resolved() Options {
	if o.Host == "" {
		o.Host = os.Getenv("DOCKER_HOST")
	}
	if o.Host == "" {
		o.Host = client.DefaultDockerHost
	}
	if o.CertPath == "" {
		o.CertPath = os.Getenv("DOCKER_CERT_PATH")
	}
	if o.TLSVerify == nil {
		v := os.Getenv("DOCKER_TLS_VERIFY") != ""
		o.TLSVerify = &v
	}
	return o
}

// HostOf names the daemon address that Connect would try.
func HostOf(o Options) string { return o.resolved().Host }

// ErrUnreachable marks a daemon that did not answer a ping.
var ErrUnreachable = errors.New("docker daemon unreachable")

// Connect makes a client for the daemon in o, negotiates the API version and
// pings it. A daemon that does not answer is an error that names the host.
func Connect(ctx context.Context, o Options) (*client.Client, error) {
	o = o.resolved()
	opts := []client.Opt{client.WithHost(o.Host), client.WithAPIVersionNegotiation()}
	if o.CertPath != "" {
		tlsc, err := tlsconfig.Client(tlsconfig.Options{
			CAFile:             filepath.Join(o.CertPath, "ca.pem"),
			CertFile:           filepath.Join(o.CertPath, "cert.pem"),
			KeyFile:            filepath.Join(o.CertPath, "key.pem"),
			InsecureSkipVerify: !*o.TLSVerify,
		})
		if err != nil {
			return nil, fmt.Errorf("docker TLS config from %s: %w", o.CertPath, err)
		}
		opts = append(opts, client.WithHTTPClient(&http.Client{
			Transport:     &http.Transport{TLSClientConfig: tlsc},
			CheckRedirect: client.CheckRedirect,
		}))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker client for %s: %w", o.Host, err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("%w at %s: %w", ErrUnreachable, o.Host, err), cli.Close())
	}
	cli.NegotiateAPIVersion(ctx)
	return cli, nil
}
