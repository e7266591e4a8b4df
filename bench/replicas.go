package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Replicas as the scale-out path (issue 19): "bridge-2" in -compare runs
// two bridges with the same policy against the same Consul, and the
// fleet's connections alternate between them, as Envoys whose bootstrap
// lists both addresses would pick one. Rows sum both replicas' CPU, peak
// RSS and Consul requests and say what each took; S3 also says whether
// every client, whichever replica it is on, holds the same version of
// every type (versions are content hashes, so they must be).

// startReplicas starts two bridges, each in its own directory under dir,
// on the server CPUs.
func startReplicas(ctx context.Context, o *Options, dir, consulAddr, policy string) (*Target, []*Target, error) {
	var ts []*Target
	for _, name := range []string{"a", "b"} {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, nil, err
		}
		t, err := StartBridge(ctx, o.BridgeBin, d, consulAddr, policy, o.ServerCPUs, cpuCount(o.ServerCPUs), o.BridgeLogLevel, o.BridgeXDS...)
		if err != nil {
			for _, t := range ts {
				t.Stop()
			}
			return nil, nil, fmt.Errorf("replica %s: %w", name, err)
		}
		t.Name = "bridge-2"
		ts = append(ts, t)
	}
	return ts[0], ts[1:], nil
}

// sameVersions says whether the clients of every replica hold one and the
// same version of each type.
func sameVersions(f *Fleet) string {
	by := f.VersionsByReplica()
	var diffs []string
	for _, typ := range slices.Sorted(maps.Keys(by[0])) {
		want := by[0][typ]
		if len(want) != 1 {
			diffs = append(diffs, fmt.Sprintf("%s: %d versions on replica A", typ, len(want)))
			continue
		}
		for i, m := range by[1:] {
			if got := m[typ]; !slices.Equal(got, want) {
				diffs = append(diffs, fmt.Sprintf("%s: replica %c holds %v, A %v", typ, 'B'+i, got, want))
			}
		}
	}
	if len(diffs) > 0 {
		return "versions DIFFER across replicas: " + strings.Join(diffs, ", ")
	}
	return fmt.Sprintf("every client on both replicas holds the same version of each of %d types", len(by[0]))
}
