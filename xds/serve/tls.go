package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/boundedread"
)

// TLSFiles names the PEM files xDS is served with: the server's
// certificate and key and, for mutual TLS, the CA its clients' certificates
// must chain to. They are re-read when they change on disk (certReloader).
// serve's own type, so that the runtime does not depend on the policy
// package its callers read the settings from (policy.TLSFiles converts).
type TLSFiles struct {
	CertFile     string
	KeyFile      string
	ClientCAFile string
}

// certReloader serves the files' current contents: every handshake checks
// whether a file changed (a stat, cheap next to a handshake) and reloads
// it, so rotated certificates apply without a restart. A rotation that
// fails to load (half-written file, key not matching) is logged and the
// last good pair keeps serving.
type certReloader struct {
	files TLSFiles
	log   zerolog.Logger

	mu     sync.Mutex
	stamp  string
	config *tls.Config
}

func newCertReloader(files TLSFiles, log zerolog.Logger) (*certReloader, error) {
	r := &certReloader{files: files, log: log}
	if _, err := r.current(); err != nil {
		return nil, err
	}
	return r, nil
}

// TLSConfig is the server configuration to hand to gRPC.
func (r *certReloader) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.current()
		},
	}
}

func (r *certReloader) current() (*tls.Config, error) {
	stamp := r.stampFiles()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.config != nil && stamp == r.stamp {
		return r.config, nil
	}
	cfg, err := r.load()
	if err != nil {
		if r.config == nil {
			return nil, err
		}
		r.log.Error().Err(err).Msg("reloading xDS TLS files failed; keeping the previous certificate")
		r.stamp = stamp // do not retry on every handshake until the files change again
		return r.config, nil
	}
	if r.config != nil {
		r.log.Info().Str("cert_file", r.files.CertFile).Msg("xDS TLS certificate reloaded")
	}
	r.config, r.stamp = cfg, stamp
	return cfg, nil
}

func (r *certReloader) stampFiles() string {
	s := ""
	for _, f := range []string{r.files.CertFile, r.files.KeyFile, r.files.ClientCAFile} {
		if f == "" {
			continue
		}
		if fi, err := os.Stat(f); err == nil {
			s += fmt.Sprintf("%s:%d:%d;", f, fi.ModTime().UnixNano(), fi.Size())
		} else {
			s += f + ":missing;"
		}
	}
	return s
}

// maxTLSFileBytes bounds the xDS server's certificate, key and client CA
// files, as the policy's PEM files are bounded (policy.MaxPEMFileBytes).
const maxTLSFileBytes = 1 << 20

func (r *certReloader) load() (*tls.Config, error) {
	// Read bounded (a regular file, up to maxTLSFileBytes, within a
	// deadline), as every file the bridge is told to read: a FIFO or a
	// hung mount named here would hold the start or a reload forever.
	certPEM, err := boundedread.Read(context.Background(), r.files.CertFile, maxTLSFileBytes)
	if err != nil {
		return nil, fmt.Errorf("xds tls: cert_file: %w", err)
	}
	keyPEM, err := boundedread.Read(context.Background(), r.files.KeyFile, maxTLSFileBytes)
	if err != nil {
		return nil, fmt.Errorf("xds tls: key_file: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("xds tls: load %s and %s: %w", r.files.CertFile, r.files.KeyFile, err)
	}
	if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil && time.Now().After(leaf.NotAfter) {
		return nil, fmt.Errorf("xds tls: %s expired at %s", r.files.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	// h2 for gRPC, http/1.1 for REST-JSON xDS on the same port.
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
	if r.files.ClientCAFile != "" {
		pem, err := boundedread.Read(context.Background(), r.files.ClientCAFile, maxTLSFileBytes)
		if err != nil {
			return nil, fmt.Errorf("xds tls: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("xds tls: client_ca_file " + r.files.ClientCAFile + " holds no PEM certificate")
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
