package serve

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/hostilefile"
)

// TestTLSFilesReadBounded: the xDS server's certificate, key and client
// CA are read as every file the bridge is told to read: a FIFO in their
// place (no writer, ever) is refused at once, naming the setting and the
// path, where tls.LoadX509KeyPair and os.ReadFile waited for a writer and
// held the start (or a reload) forever; a file over 1 MiB is refused by
// its size.
func TestTLSFilesReadBounded(t *testing.T) {
	ca := newTestCA(t)
	good := serverTLSFiles(t, ca)
	fifo := hostilefile.FIFO(t, "fifo.pem")
	big := filepath.Join(t.TempDir(), "big.pem")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		files TLSFiles
		want  string
	}{
		"cert FIFO":      {TLSFiles{CertFile: fifo, KeyFile: good.KeyFile}, "cert_file: read " + fifo + ": not a regular file (a FIFO)"},
		"key FIFO":       {TLSFiles{CertFile: good.CertFile, KeyFile: fifo}, "key_file: read " + fifo + ": not a regular file (a FIFO)"},
		"client CA FIFO": {TLSFiles{CertFile: good.CertFile, KeyFile: good.KeyFile, ClientCAFile: fifo}, "client CA: read " + fifo + ": not a regular file (a FIFO)"},
		"cert too large": {TLSFiles{CertFile: big, KeyFile: good.KeyFile}, "over the limit of 1048576"},
	} {
		t.Run(name, func(t *testing.T) {
			hostilefile.Refused(t, "loading the TLS files", tc.want, func() error {
				_, err := newCertReloader(tc.files, zerolog.Nop())
				return err
			})
		})
	}
}
