package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync"
	"time"
)

// Agent CAs.
//
// Each agent has its own CA, which only its sandboxes trust and only the
// proxy can sign with. Its key is derived from the topology's egress key
// and the agent id, so every proxy of the topology (a restarted one, a
// second replica) has the same CA without storing a key anywhere, and a
// runner, which holds only its agent's derived key, cannot sign. A leaf
// for a bound host lives a day and is kept in memory.

// leafLife is how long a bound host's certificate is valid; a cached one
// is renewed when less than a quarter of it is left.
const leafLife = 24 * time.Hour

// maxLeaves bounds the leaf cache; past it the cache starts again.
const maxLeaves = 4096

type agentCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

type authorities struct {
	key []byte

	mu     sync.Mutex
	cas    map[string]*agentCA
	leaves map[string]*tls.Certificate // agent \x00 host
}

func newAuthorities(key []byte) *authorities {
	return &authorities{key: key, cas: map[string]*agentCA{}, leaves: map[string]*tls.Certificate{}}
}

// derive is an HMAC of the topology key for one agent and purpose.
func (a *authorities) derive(agent, purpose string, n int) []byte {
	m := hmac.New(sha256.New, a.key)
	_, _ = fmt.Fprintf(m, "meepa-egress-ca\x00%s\x00%s\x00%d", agent, purpose, n) // a hash's Write never fails
	return m.Sum(nil)
}

// of is the agent's CA.
func (a *authorities) of(agent string) (*agentCA, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ca, ok := a.cas[agent]; ok {
		return ca, nil
	}
	var key *ecdsa.PrivateKey
	for n := 0; key == nil; n++ {
		if n == 8 {
			return nil, errors.New("agent CA: no P-256 key from the derivation") // 2^-256 odds per try
		}
		key, _ = ecdsa.ParseRawPrivateKey(elliptic.P256(), a.derive(agent, "key", n))
	}
	serial := new(big.Int).SetBytes(a.derive(agent, "serial", 0)[:16])
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"meepa"}, CommonName: "meepa egress CA of agent " + agent},
		NotBefore:             time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2045, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("agent CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("agent CA: %w", err)
	}
	ca := &agentCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	a.cas[agent] = ca
	return ca, nil
}

// leaf is a certificate for target signed by the agent's CA.
func (a *authorities) leaf(agent string, t Target) (*tls.Certificate, error) {
	k := agent + "\x00" + t.Host
	a.mu.Lock()
	c, ok := a.leaves[k]
	a.mu.Unlock()
	if ok && time.Until(c.Leaf.NotAfter) > leafLife/4 {
		return c, nil
	}
	ca, err := a.of(agent)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: t.Host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if t.IP.IsValid() {
		tmpl.IPAddresses = []net.IP{t.IP.AsSlice()}
	} else {
		tmpl.DNSNames = []string{t.Host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", t.Host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	a.mu.Lock()
	if len(a.leaves) >= maxLeaves {
		a.leaves = map[string]*tls.Certificate{}
	}
	a.leaves[k] = c
	a.mu.Unlock()
	return c, nil
}
