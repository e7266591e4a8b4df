package policy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// ReadFiles reads the PEM files the policy's tls blocks name (listener
// certificates and keys, client CAs, upstream CAs and client
// certificates), checks them and keeps their contents in the policy,
// which is what model.Build serves as SDS secrets. It is the only step of
// loading a policy that reads anything but the documents themselves:
// Parse and Merge stay pure, and LoadFiles and the daemon's reload call
// this after Merge. now decides whether a certificate has expired.
//
// Every problem is a diagnostic at the attribute that names the file: a
// file that cannot be read, PEM that does not parse, a certificate that
// has expired, a key that does not belong to its certificate, an
// encrypted key (errors); a key file that group or others may read, a
// certificate not valid yet (warnings). Diagnostics never quote a file's
// contents.
//
// Files are read with ReadBoundedFile: regular files only, PEM files up
// to MaxPEMFileBytes and JWKS files up to MaxJWKSFileBytes, all of them
// within FileReadTimeout together, so a policy naming /dev/zero, a FIFO
// or a huge file is rejected at once and never holds the caller.
func (p *Policy) ReadFiles(now time.Time) hcl.Diagnostics {
	ctx, cancel := context.WithTimeout(context.Background(), FileReadTimeout)
	defer cancel()
	rd := &fileReader{ctx: ctx, now: now, files: map[string]*fileRead{}}
	for _, s := range p.services() {
		t := s.TLS
		if t == nil {
			continue
		}
		rd.ca(t.CA)
		rd.keyPair(t.Cert, t.Key)
	}
	for _, pr := range p.proxies() {
		for _, l := range pr.Listeners {
			for _, f := range l.JWKSFiles {
				if jwks, ok := rd.jwks(f); ok {
					l.HTTP.JWTProviders[f.Provider].LocalJWKS = jwks
				}
			}
			t := l.TLS
			if t == nil {
				continue
			}
			for _, c := range t.Certificates {
				rd.keyPair(c.Cert, c.Key)
			}
			rd.ca(t.ClientCA)
		}
	}
	return rd.list
}

func (p *Policy) services() []*Service {
	if p == nil {
		return nil
	}
	return p.Services
}

func (p *Policy) proxies() []*Proxy {
	if p == nil {
		return nil
	}
	return p.Proxies
}

type fileReader struct {
	diags
	ctx   context.Context
	now   time.Time
	files map[string]*fileRead
}

// fileRead is one file's contents, read once however often it is named.
type fileRead struct {
	data []byte
	mode fs.FileMode
	err  error
}

func (rd *fileReader) read(f *PEMFile) ([]byte, fs.FileMode, bool) {
	r, ok := rd.files[f.Path]
	if !ok {
		r = &fileRead{}
		r.data, r.err = ReadBoundedFile(rd.ctx, f.Path, MaxPEMFileBytes)
		if r.err == nil {
			if fi, err := os.Stat(f.Path); err == nil {
				r.mode = fi.Mode()
			}
		}
		rd.files[f.Path] = r
	}
	if r.err != nil {
		what := map[PEMKind]string{PEMCertificate: "certificate", PEMPrivateKey: "private key", PEMCA: "CA certificate"}[f.Kind]
		// os errors name the path and the reason, never the contents.
		rd.add(f.Range, "Cannot read "+what+" file", "%v.", unwrapPathError(r.err))
		return nil, 0, false
	}
	return r.data, r.mode, true
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

// certificates parses every block of a certificate or CA file, which must
// hold CERTIFICATE blocks only: a private key there would be served in a
// field nobody treats as secret.
func (rd *fileReader) certificates(f *PEMFile, data []byte) ([]*x509.Certificate, bool) {
	var certs []*x509.Certificate
	rest := data
	for i := 1; ; i++ {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			if strings.HasSuffix(b.Type, "PRIVATE KEY") {
				rd.add(f.Range, "Private key in a certificate file", "%s holds a private key (block %d); keep the key in key_file only, so it is never served as a certificate.", f.Path, i)
			} else {
				rd.add(f.Range, "Invalid PEM", "%s: block %d is %q; this file may only hold CERTIFICATE blocks.", f.Path, i, b.Type)
			}
			return nil, false
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			rd.add(f.Range, "Invalid certificate", "%s: certificate %d does not parse: %v.", f.Path, i, err)
			return nil, false
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		rd.add(f.Range, "Invalid PEM", "%s holds no PEM certificate (-----BEGIN CERTIFICATE-----).", f.Path)
		return nil, false
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		rd.add(f.Range, "Invalid PEM", "%s has data after its last PEM block that is not PEM; a truncated or corrupted file?", f.Path)
		return nil, false
	}
	return certs, true
}

// keyPair checks a certificate chain and its private key.
func (rd *fileReader) keyPair(cert, key *PEMFile) {
	if cert == nil || key == nil {
		return
	}
	certPEM, _, certOK := rd.read(cert)
	var leaf *x509.Certificate
	if certOK {
		certs, ok := rd.certificates(cert, certPEM)
		certOK = ok
		if ok {
			leaf = certs[0]
			switch {
			case rd.now.After(leaf.NotAfter):
				rd.add(cert.Range, "Expired certificate", "%s: the certificate for %s expired at %s.", cert.Path, certSubject(leaf), leaf.NotAfter.UTC().Format(time.RFC3339))
			case rd.now.Before(leaf.NotBefore):
				rd.warn(cert.Range, "Certificate not valid yet", "%s: the certificate for %s is valid from %s; clients reject it until then.", cert.Path, certSubject(leaf), leaf.NotBefore.UTC().Format(time.RFC3339))
			}
			cert.PEM = certPEM
		}
	}
	keyPEM, mode, ok := rd.read(key)
	if !ok {
		return
	}
	if runtime.GOOS != "windows" && mode.Perm()&0o044 != 0 {
		rd.warn(key.Range, "Private key readable by others",
			"%s has mode %04o, so group or others may read the private key; make it readable by the bridge's user only (chmod 600).", key.Path, mode.Perm())
	}
	if !rd.privateKey(key, keyPEM) {
		return
	}
	key.PEM = keyPEM
	if !certOK {
		return
	}
	// The messages of X509KeyPair say what is wrong ("private key does
	// not match public key"), never what the key is.
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		rd.add(key.Range, "Key does not match certificate", "%s is not the private key of the certificate in %s (%s).", key.Path, cert.Path, strings.TrimPrefix(err.Error(), "tls: "))
	}
}

// privateKey checks that a key file holds one unencrypted private key
// that parses.
func (rd *fileReader) privateKey(f *PEMFile, data []byte) bool {
	var key *pem.Block
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "PRIVATE KEY" && !strings.HasSuffix(b.Type, " PRIVATE KEY") {
			continue // EC PARAMETERS, or a certificate kept with its key
		}
		if key != nil {
			rd.add(f.Range, "Invalid PEM", "%s holds more than one private key; keep one key per key_file.", f.Path)
			return false
		}
		key = b
	}
	switch {
	case key == nil:
		rd.add(f.Range, "Invalid PEM", "%s holds no PEM private key (-----BEGIN PRIVATE KEY-----, or an RSA or EC PRIVATE KEY).", f.Path)
		return false
	case key.Type == "ENCRYPTED PRIVATE KEY" || key.Headers["Proc-Type"] != "":
		rd.add(f.Range, "Encrypted private key", "%s is protected by a passphrase, which Envoy cannot use over SDS; store it decrypted (openssl pkey -in KEY -out KEY.decrypted) with mode 0600.", f.Path)
		return false
	}
	if _, err := x509.ParsePKCS8PrivateKey(key.Bytes); err == nil {
		return true
	}
	if _, err := x509.ParsePKCS1PrivateKey(key.Bytes); err == nil {
		return true
	}
	if _, err := x509.ParseECPrivateKey(key.Bytes); err == nil {
		return true
	}
	rd.add(f.Range, "Invalid private key", "%s: the %s block does not parse as a PKCS #8, PKCS #1 or EC private key.", f.Path, key.Type)
	return false
}

// ca checks a CA file: certificates that parse, not all of them expired
// (a bundle may carry some expired roots).
func (rd *fileReader) ca(f *PEMFile) {
	if f == nil {
		return
	}
	data, _, ok := rd.read(f)
	if !ok {
		return
	}
	certs, ok := rd.certificates(f, data)
	if !ok {
		return
	}
	valid := 0
	var last *x509.Certificate
	for _, c := range certs {
		if !rd.now.After(c.NotAfter) {
			valid++
		}
		last = c
	}
	if valid == 0 {
		rd.add(f.Range, "Expired certificate", "%s: every CA certificate has expired (%s at %s), so no peer certificate can be verified.", f.Path, certSubject(last), last.NotAfter.UTC().Format(time.RFC3339))
		return
	}
	f.PEM = data
}

func certSubject(c *x509.Certificate) string {
	switch {
	case len(c.DNSNames) > 0:
		return fmt.Sprintf("%q", c.DNSNames[0])
	case c.Subject.CommonName != "":
		return fmt.Sprintf("%q", c.Subject.CommonName)
	}
	return fmt.Sprintf("serial %s", c.SerialNumber)
}

// jwks reads a JWT provider's local key set, which must be a JSON Web Key
// Set with at least one key (RFC 7517): Envoy would otherwise reject the
// listener, or verify no token.
func (rd *fileReader) jwks(f *JWKSFile) (string, bool) {
	data, err := ReadBoundedFile(rd.ctx, f.Path, MaxJWKSFileBytes)
	if err != nil {
		rd.add(f.Range, "Cannot read JWKS file", "%v.", unwrapPathError(err))
		return "", false
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil || len(set.Keys) == 0 {
		rd.add(f.Range, "Invalid JWKS file", "%s is not a JSON Web Key Set: a JSON object whose \"keys\" array holds at least one key.", f.Path)
		return "", false
	}
	return string(data), true
}
