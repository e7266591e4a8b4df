//go:build vtprotobuf

// go test -tags vtprotobuf -run XXX -bench MarshalVT ./xds/serve: the
// vtprotobuf code go-control-plane ships is built only with that tag.

package serve

import (
	"bytes"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// BenchmarkMarshalVT: the encoding every changed resource gets once per
// build (cachev3.MarshalResource, protobuf-go deterministic) against the
// vtprotobuf code go-control-plane ships (MarshalVTStrict). Reported as
// bytes each way equal ("same") too: versions are hashes of the encoding,
// so a faster encoder that differed would change every version.
func BenchmarkMarshalVT(b *testing.B) {
	out, err := xds.Translate(benchModel(-1))
	if err != nil {
		b.Fatal(err)
	}
	byType := out.Shared.ByType()
	type vt interface{ MarshalVTStrict() ([]byte, error) }
	for _, bc := range []struct {
		name  string
		items []types.Resource
	}{
		{"EDSAll", byType[resourcev3.EndpointType]},
		{"CDSAll", byType[resourcev3.ClusterType]},
		{"LDSAll", byType[resourcev3.ListenerType]},
	} {
		same := 0
		for _, r := range bc.items {
			a, _ := cachev3.MarshalResource(r)
			v, _ := r.(vt).MarshalVTStrict()
			if bytes.Equal(a, v) {
				same++
			}
		}
		for _, enc := range []struct {
			name string
			f    func(types.Resource) ([]byte, error)
		}{
			{"proto", cachev3.MarshalResource},
			{"vtproto", func(r types.Resource) ([]byte, error) { return r.(vt).MarshalVTStrict() }},
		} {
			b.Run(bc.name+"/"+enc.name, func(b *testing.B) {
				b.Logf("%s: %d of %d encodings byte-identical", bc.name, same, len(bc.items))
				b.ReportAllocs()
				for b.Loop() {
					for _, r := range bc.items {
						if _, err := enc.f(r); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
