package policy

import (
	"context"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/boundedread"
)

// Limits of the files a policy, a config entry or a state file names.
// Whoever can write the KV policy prefix can name any path on the
// bridge's host, so every such file is read by ReadBoundedFile: a
// regular file only, up to a size, within a deadline.
const (
	// MaxPEMFileBytes bounds a certificate, key or CA file. The largest
	// real one is a CA bundle: Mozilla's whole trust store is ~220 KB.
	MaxPEMFileBytes = 1 << 20
	// MaxJWKSFileBytes bounds a local JWKS file. Envoy inlines the set into
	// every listener that uses it (LDS), so each push carries it once per
	// listener; real key sets hold a few keys of ~1 KB each.
	MaxJWKSFileBytes = 256 << 10
	// FileReadTimeout bounds one file read: a local file reads in
	// microseconds, a hung network file system never (see ParseBudget in
	// bridge/docparse.go, the same bound for parsing one document).
	FileReadTimeout = boundedread.Timeout
)

// The errors of ReadBoundedFile (errors.Is).
var (
	// ErrNotRegularFile: a device, a FIFO, a socket or a directory.
	ErrNotRegularFile = boundedread.ErrNotRegularFile
	// ErrFileTooLarge: over the size limit.
	ErrFileTooLarge = boundedread.ErrFileTooLarge
	// ErrReadTimeout: the read outlived its deadline.
	ErrReadTimeout = boundedread.ErrReadTimeout
)

// ReadBoundedFile reads the file at path if it is a regular file of at
// most max bytes, within ctx's deadline or FileReadTimeout
// (boundedread.Read). Every file input of the daemon and the agent
// (-config files, PEM and JWKS files, state files, settings files) goes
// through it; any other reader of a path a user names (the /v1/plan API,
// CLI commands) should too, with the limit of the kind of file it reads
// (see docs/input-limits.md).
func ReadBoundedFile(ctx context.Context, path string, max int64) ([]byte, error) {
	return boundedread.Read(ctx, path, max)
}
