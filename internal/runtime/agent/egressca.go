package agent

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The agent's egress CA in a message's sandbox.
//
// For a host a secret is bound to, the egress proxy answers a tool's TLS
// with a certificate of the agent's CA. The tools trust it through two
// read-only files in a directory of their temporary one: the CA alone
// (NODE_EXTRA_CA_CERTS, which Node adds to its own roots) and the image's
// system bundle with the CA appended (SSL_CERT_FILE and the variables of
// curl, Python requests and git, which replace the roots they read). A
// tool that changes or ignores them only loses its own bound hosts: the
// CA signs nothing but what the proxy brokers, and its key never leaves
// the proxy.

// systemBundles are where images keep the system's roots.
var systemBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// caEnvBundle are the variables that name the whole bundle.
var caEnvBundle = []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO"}

type egressCA struct {
	dir   string
	env   []string
	roots *x509.CertPool
}

// trustEgressCA writes the CA files under the tools' TMPDIR (from env)
// and returns their variables and the pool fetch uses.
func trustEgressCA(pemText string, env []string) (*egressCA, error) {
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM([]byte(pemText)) {
		return nil, errors.New("egress_ca: no PEM certificate in it")
	}
	tmp := "/tmp"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "TMPDIR="); ok && v != "" {
			tmp = v
		}
	}
	dir, err := os.MkdirTemp(tmp, "meepa-egress-ca-")
	if err != nil {
		return nil, fmt.Errorf("egress_ca: %w", err)
	}
	ca := &egressCA{dir: dir, roots: roots}
	bundle := []byte{}
	for _, p := range systemBundles {
		if b, err := os.ReadFile(p); err == nil {
			bundle = append(b, '\n')
			break
		}
	}
	bundle = append(bundle, pemText...)
	only, all := filepath.Join(dir, "egress-ca.pem"), filepath.Join(dir, "ca-bundle.pem")
	for _, f := range []struct {
		path string
		data []byte
	}{{only, []byte(pemText)}, {all, bundle}} {
		if err := os.WriteFile(f.path, f.data, 0o444); err != nil {
			ca.remove()
			return nil, fmt.Errorf("egress_ca: %w", err)
		}
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		ca.remove()
		return nil, fmt.Errorf("egress_ca: %w", err)
	}
	for _, k := range caEnvBundle {
		ca.env = append(ca.env, k+"="+all)
	}
	ca.env = append(ca.env, "NODE_EXTRA_CA_CERTS="+only)
	return ca, nil
}

// remove deletes the files (the sandbox ends anyway; host mode's does not).
func (c *egressCA) remove() {
	_ = os.Chmod(c.dir, 0o755) // to remove what is in it
	_ = os.RemoveAll(c.dir)
}
