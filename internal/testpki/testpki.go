// Package testpki issues throwaway certificates for tests of the bridge's
// TLS: the xDS server's mTLS, SDS secrets and policy file checks.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	t    testing.TB
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, for trust bundles.
	PEM []byte
}

// New returns a CA valid from an hour ago for a day.
func New(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{t: t, Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf describes a certificate to issue; zero times mean "valid now for a
// day", a zero serial a fresh one.
type Leaf struct {
	DNS       []string
	URIs      []string
	Serial    int64
	NotBefore time.Time
	NotAfter  time.Time
}

var serials atomic.Int64

// Issue returns a PEM certificate for l (server and client use) and its
// PKCS #8 key.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEM []byte) {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	if l.Serial == 0 {
		l.Serial = 1000 + serials.Add(1)
	}
	if l.NotBefore.IsZero() {
		l.NotBefore = time.Now().Add(-2 * time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = time.Now().Add(24 * time.Hour)
	}
	cn := "test"
	if len(l.DNS) > 0 {
		cn = l.DNS[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(l.Serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: l.NotBefore, NotAfter: l.NotAfter, DNSNames: l.DNS,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, u := range l.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			ca.t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	kb, _ := x509.MarshalPKCS8PrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})
}

// ReplaceFile writes then renames, as config managers and certificate
// tools do, so a reader never sees half a file.
func ReplaceFile(t testing.TB, path string, b []byte, mode os.FileMode) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
