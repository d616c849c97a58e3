package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// TLSAPI is an HTTPS server in the outside namespace with a CA of its
// own, standing in for an API a brokered secret is bound to. It records
// every request's headers and answers each with them, one "name: value"
// line per header, so a test sees both what arrived and what a reply
// carries back.
type TLSAPI struct {
	// CAPEM is the CA its certificate chains to (for a proxy's upstream_ca).
	CAPEM string
	mu    sync.Mutex
	seen  []http.Header
}

// ServeTLSAPI starts a TLSAPI on port of the namespace's address, with a
// certificate for that address, until the test ends.
func (o *Outside) ServeTLSAPI(t testing.TB, port int) *TLSAPI {
	t.Helper()
	caPEM, cert, err := selfCA(net.ParseIP(o.IP))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := listenInNetns("/run/netns/"+o.NS, o.Addr(port))
	if err != nil {
		t.Fatalf("listen in %s: %v", o.NS, err)
	}
	a := &TLSAPI{CAPEM: caPEM}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := r.Header.Clone()
			h.Set("Host", r.Host)
			a.mu.Lock()
			a.seen = append(a.seen, h)
			a.mu.Unlock()
			names := make([]string, 0, len(h))
			for k := range h {
				names = append(names, k)
			}
			sort.Strings(names)
			w.Header().Set("Content-Type", "text/plain")
			for _, k := range names {
				_, _ = fmt.Fprintf(w, "%s: %s\n", k, strings.Join(h[k], ", ")) // a failed write shows as a short body
			}
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 5 * time.Second,
	}
	Cleanup(t, "stop the outside HTTPS API", func() error { return srv.Close() })
	go func() { _ = srv.ServeTLS(ln, "", "") }() // returns ErrServerClosed once the test ends
	return a
}

// Seen is the headers of every request so far (Host among them), oldest
// first.
func (a *TLSAPI) Seen() []http.Header {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]http.Header(nil), a.seen...)
}

// selfCA makes a CA (returned as PEM) and a server certificate for ip
// signed by it.
func selfCA(ip net.IP) (string, tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", tls.Certificate{}, err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "meepa test API CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return "", tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", tls.Certificate{}, err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ip.String()}, IPAddresses: []net.IP{ip},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", tls.Certificate{}, err
	}
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	return caPEM, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
