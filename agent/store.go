package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// maxStateBytes bounds one key's state file: a key's config is at most
// what one response may carry (64 MiB), and a full disk or a runaway
// upstream must not fill the data directory.
const maxStateBytes = 64 << 20

// stateMarker is the type URL of a state file's envelope.
const stateMarker = "consul-xds-bridge/agent-state/v1"

// store keeps the last good config of every key on disk: one file per
// key (named by a hash: keys are client-chosen strings), written
// atomically (temp file, fsync, rename) with mode 0600, since it holds
// private keys when the central bridge serves secrets.
type store struct{ dir string }

func (s store) file(key string) string {
	h := sha256.Sum256([]byte(key))
	return filepath.Join(s.dir, "node-"+hex.EncodeToString(h[:8])+".pb")
}

// save writes key's resources (every type, each an Any).
func (s store) save(key string, resources []*anypb.Any) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&discoveryv3.DiscoveryResponse{TypeUrl: stateMarker, VersionInfo: key, Resources: resources})
	if err != nil {
		return err
	}
	if len(b) > maxStateBytes {
		return fmt.Errorf("state of %q is %d bytes, over the limit of %d; not saved", key, len(b), maxStateBytes)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	return writeFileAtomic(s.file(key), b)
}

// remove deletes key's saved config, if any.
func (s store) remove(key string) error {
	if err := os.Remove(s.file(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// loadAll reads every saved key. A damaged file is reported and skipped,
// never fatal: the agent then waits for the central bridge for that key.
func (s store) loadAll() (map[string][]*anypb.Any, []error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{err}
	}
	out := map[string][]*anypb.Any{}
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "node-") || !strings.HasSuffix(e.Name(), ".pb") {
			continue
		}
		p := filepath.Join(s.dir, e.Name())
		// Bounded: a state file replaced by a link to /dev/zero, a FIFO
		// or a huge sparse file must not hold or swamp the start.
		b, err := policy.ReadBoundedFile(context.Background(), p, maxStateBytes)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w; ignored", err))
			continue
		}
		var r discoveryv3.DiscoveryResponse
		if err := proto.Unmarshal(b, &r); err != nil || r.GetTypeUrl() != stateMarker {
			errs = append(errs, fmt.Errorf("%s: not an agent state file; ignored", p))
			continue
		}
		out[r.GetVersionInfo()] = r.GetResources()
	}
	return out, errs
}
