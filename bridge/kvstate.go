package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/hashicorp/hcl/v2"
)

// The KV state file keeps the KV policy documents of the last accepted
// policy (consul.state_dir/kv-policy.json). A bridge that starts while a
// KV document is broken has no last good policy in memory; with the file
// it serves that document's last accepted version instead of either a
// policy without it or nothing at all.

const kvStateFile = "kv-policy.json"

// maxKVStateBytes bounds the state file, read at start: the accepted KV
// documents as JSON. Real ones are a few documents of a few KB; a file
// over the bound is not written, and one found over it (or a link to a
// device, a FIFO or a huge sparse file) is ignored with an error.
const maxKVStateBytes = 64 << 20

type kvState struct {
	Prefix    string              `json:"prefix"`
	Documents []consul.KVDocument `json:"documents"`
}

// saveKVState writes the accepted documents atomically: a crash leaves
// the old file or the new one, never half of one.
func saveKVState(dir, prefix string, docs []consul.KVDocument) error {
	b, err := json.MarshalIndent(kvState{Prefix: prefix, Documents: docs}, "", "  ")
	if err != nil {
		return err
	}
	if len(b) > maxKVStateBytes {
		return fmt.Errorf("the accepted KV documents are %d bytes as JSON, over the state file's limit of %d; not saved", len(b), maxKVStateBytes)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, kvStateFile+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename, a no-op
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, kvStateFile))
}

// loadKVState reads the state file; (nil, nil) if there is none or it is
// for another prefix.
func loadKVState(dir, prefix string) (*kvState, error) {
	b, err := policy.ReadBoundedFile(context.Background(), filepath.Join(dir, kvStateFile), maxKVStateBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st kvState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, kvStateFile), err)
	}
	if st.Prefix != prefix {
		return nil, nil
	}
	return &st, nil
}

// patchKV replaces, in cur, every document that does not parse, that was
// left out for breaking a limit, or that the diagnostics of the rejected
// policy point into (broken: by key), with its last accepted version from
// st, and reports the keys it replaced. Keys st lacks stay as they are.
func patchKV(cur *consul.KVUpdate, st *kvState, broken map[string]bool) (*consul.KVUpdate, []string) {
	last := map[string]consul.KVDocument{}
	for _, d := range st.Documents {
		last[d.Key] = d
	}
	out := &consul.KVUpdate{}
	var replaced []string
	for _, d := range cur.Documents {
		if _, diags := policy.ParseKV(d.Key, d.Value); diags.HasErrors() || broken[d.Key] {
			if prev, ok := last[d.Key]; ok {
				d = prev
				replaced = append(replaced, d.Key)
			}
		}
		out.Documents = append(out.Documents, d)
	}
	for _, r := range cur.Rejected {
		key, _, _ := strings.Cut(r, ": ")
		if prev, ok := last[key]; ok {
			out.Documents = append(out.Documents, prev)
			replaced = append(replaced, key)
			continue
		}
		out.Rejected = append(out.Rejected, r)
	}
	// In key order, as the watcher hands them over (merge order).
	slices.SortFunc(out.Documents, func(a, b consul.KVDocument) int { return strings.Compare(a.Key, b.Key) })
	return out, replaced
}

// brokenKeys lists the documents diagnostics point into.
func brokenKeys(diags hclDiagnostics) map[string]bool {
	keys := map[string]bool{}
	for _, d := range diags {
		if d.Severity == hcl.DiagError && d.Subject != nil {
			keys[d.Subject.Filename] = true
		}
	}
	return keys
}
