package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// Proxyless gRPC takes its mesh certificates from files: grpc-go's
// file_watcher certificate provider (named in the gRPC bootstrap's
// certificate_providers, which `bootstrap -grpc -mesh-cert-dir` writes)
// re-reads them every refresh_interval. It cannot take SDS, so with
// connect.cert_dir set the agent writes what it serves over SDS to files
// too:
//
//	CERT_DIR/SERVICE/cert.pem   the service's Connect leaf certificate
//	CERT_DIR/SERVICE/key.pem    its private key
//	CERT_DIR/SERVICE/roots.pem  the Connect CA roots (the trust bundle)
//
// Each service has a directory of its own (mode 0700), so a process is
// given one service's key by the directory's owner, and each file is 0600.
// Every write goes to a temporary file in the same directory and is
// renamed over the old one, so a reader sees the old file or the new one,
// never half of either. The leaf and key are two files: between their two
// renames a reader may pair the new key with the old certificate; grpc-go
// then fails to load the pair, keeps the identity it had and loads the new
// one on its next refresh.

// Names of the files in a service's certificate directory; the gRPC
// bootstrap (xds.GRPCBootstrap) names the same files.
const (
	CertFileName  = xds.MeshCertFile
	KeyFileName   = xds.MeshKeyFile
	RootsFileName = xds.MeshRootsFile
)

// writeLeafFiles writes svc's leaf and key under dir.
func writeLeafFiles(dir, svc, certPEM, keyPEM string) error {
	d := filepath.Join(dir, svc)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	// The key first: a reader between the renames pairs the new key
	// with the old certificate, which fails to load and is retried, rather
	// than the old key with a new certificate issued for a new key.
	return errors.Join(writeFileAtomic(filepath.Join(d, KeyFileName), []byte(keyPEM)),
		writeFileAtomic(filepath.Join(d, CertFileName), []byte(certPEM)))
}

// writeRootsFiles writes the roots into every service's directory.
func writeRootsFiles(dir string, services []string, bundle string) error {
	var errs []error
	for _, svc := range services {
		d := filepath.Join(dir, svc)
		if err := os.MkdirAll(d, 0o700); err != nil {
			errs = append(errs, fmt.Errorf("connect cert_dir: %w", err))
			continue
		}
		errs = append(errs, writeFileAtomic(filepath.Join(d, RootsFileName), []byte(bundle)))
	}
	return errors.Join(errs...)
}

// writeFileAtomic replaces name with data (mode 0600) by a rename, after
// syncing the data, so a crash leaves the old file or the new one. The
// state files and the Connect certificate files are written with it.
func writeFileAtomic(name string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*") // created 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600) // CreateTemp's mode, said once more in case of an odd umask
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}
