package kube

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// RegistryConfig says where the provider pushes its images so that a
// cluster's nodes can pull them. The zero value is not usable: Address is
// required. Username/Password and Token are exclusive; with neither the
// registry is used anonymously.
type RegistryConfig struct {
	// Address is host[:port] with an optional path prefix under which the
	// repositories go: "registry.example.com", "10.0.0.5:5000/meepa".
	// No scheme: plain HTTP is Insecure's decision, never an address's.
	Address string
	// Username and Password answer a Basic challenge.
	Username string
	Password string
	// Token is a bearer token sent as it is (a registry access token).
	Token string
	// Insecure allows plain HTTP, for a test registry. Without it every
	// request goes over TLS, also to loopback and private addresses, where
	// go-containerregistry would otherwise fall back to HTTP and could send
	// the credentials in clear.
	Insecure bool
}

// String names the registry and the kind of credentials, never their
// values, so a config can be logged or printed in an error.
func (c RegistryConfig) String() string {
	auth := "anonymous"
	switch {
	case c.Token != "":
		auth = "token"
	case c.Username != "":
		auth = "user " + c.Username
	}
	scheme := "https"
	if c.Insecure {
		scheme = "http"
	}
	return fmt.Sprintf("%s (%s, %s)", c.Address, scheme, auth)
}

// GoString keeps %#v from printing the credentials.
func (c RegistryConfig) GoString() string { return "kube.RegistryConfig{" + c.String() + "}" }

// registryPath is the path prefix grammar of the distribution spec.
var registryPath = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)

// Validate checks every field; the provider calls it at plan time, the
// pusher before it sends anything. Each error is an *fault.FieldError
// at registry.<field>, as the provider's schema names it.
func (c RegistryConfig) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &fault.FieldError{Field: "registry." + field, Index: -1, Err: fmt.Errorf(format, args...)})
	}
	host, path, _ := strings.Cut(c.Address, "/")
	switch {
	case c.Address == "":
		bad("address", "the registry address is empty; give host[:port] with an optional path, such as registry.example.com:5000/meepa")
	case strings.Contains(c.Address, "://"):
		bad("address", "%q has a scheme; write host[:port][/path] and set insecure = true for a plain-HTTP registry", c.Address)
	case strings.ContainsAny(c.Address, "@ \t\r\n") || strings.HasSuffix(c.Address, "/"):
		bad("address", "%q is not host[:port][/path]: no '@', whitespace or trailing '/'", c.Address)
	default:
		if _, err := name.NewRegistry(host, name.StrictValidation); err != nil {
			bad("address", "%q: %v", host, err)
		}
		if path != "" && !registryPath.MatchString(path) {
			bad("address", "path %q: use lower-case letters, digits and separators (. _ __ -), components joined by '/'", path)
		}
	}
	if c.Token != "" && (c.Username != "" || c.Password != "") {
		bad("token", "give either a token or a username and password, not both")
	}
	if (c.Username == "") != (c.Password == "") {
		field := "password"
		if c.Username == "" {
			field = "username"
		}
		bad(field, "a username needs a password and a password a username")
	}
	if strings.Contains(c.Username, ":") {
		bad("username", "a username cannot contain ':' (Basic authentication separates it from the password with one)")
	}
	return errors.Join(errs...)
}

// nameOptions are the reference parsing options for this registry.
func (c RegistryConfig) nameOptions() []name.Option {
	opts := []name.Option{name.StrictValidation}
	if c.Insecure {
		opts = append(opts, name.Insecure)
	}
	return opts
}

// authenticator turns the credentials into what go-containerregistry sends.
func (c RegistryConfig) authenticator() authn.Authenticator {
	switch {
	case c.Token != "":
		return authn.FromConfig(authn.AuthConfig{RegistryToken: c.Token})
	case c.Username != "":
		return authn.FromConfig(authn.AuthConfig{Username: c.Username, Password: c.Password})
	}
	return authn.Anonymous
}

// transport is the HTTP transport of every registry request: TLS only
// unless Insecure.
func (c RegistryConfig) transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = remote.DefaultTransport
	}
	if c.Insecure {
		return base
	}
	return tlsOnly{next: base}
}

// ErrPlainHTTP marks a request that would have left over plain HTTP to a
// registry that is not marked insecure.
var ErrPlainHTTP = errors.New("plain HTTP to a registry not marked insecure")

// tlsOnly refuses every request that is not HTTPS. go-containerregistry
// tries HTTP beside HTTPS for loopback and RFC 1918 registries, and a
// token realm or a redirect may name an http:// URL: with this, none of
// them can carry credentials in clear.
type tlsOnly struct{ next http.RoundTripper }

func (t tlsOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "https" {
		if r.Body != nil {
			_ = r.Body.Close() // a RoundTripper owns the body, also when it refuses
		}
		return nil, fmt.Errorf("%w: refusing %s://%s (set insecure = true for a test registry)", ErrPlainHTTP, r.URL.Scheme, r.URL.Host)
	}
	return t.next.RoundTrip(r)
}

// localRef is a local image reference the pusher accepts: a repository
// without a registry host and a tag, such as meepa-sandbox:3f9a1c2b4d5e.
var localRef = regexp.MustCompile(`^([a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*):([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$`)

// remoteTag is where a local image goes: the same repository path and tag
// under the registry's address.
func (c RegistryConfig) remoteTag(local string) (name.Tag, error) {
	m := localRef.FindStringSubmatch(local)
	if m == nil || strings.Contains(strings.SplitN(m[1], "/", 2)[0], ".") {
		return name.Tag{}, fmt.Errorf("%q is not a local image reference repo:tag without a registry host", local)
	}
	t, err := name.NewTag(c.Address+"/"+m[1]+":"+m[2], c.nameOptions()...)
	if err != nil {
		return name.Tag{}, fmt.Errorf("registry reference for %s: %w", local, err)
	}
	return t, nil
}
