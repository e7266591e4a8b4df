package serve

import (
	"context"
	"fmt"
	"testing"

	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// BenchmarkUpdateEnvoyClasses: Server.Update after a one-endpoint change
// (the daemon's Translator, so unchanged resources keep their objects)
// for keys of the newest Envoy (the baseline) and of Envoy 1.22, whose
// 1000 clusters all need a rewritten copy (their load_balancing_policy
// goes). One key or ten of the old class should cost alike: the copy is
// made once per class, not per key.
func BenchmarkUpdateEnvoyClasses(b *testing.B) {
	tr := xds.NewTranslator()
	var outs [2]*xds.Output
	for k := range outs {
		m := benchModel(k)
		for i := range m.Clusters {
			m.Clusters[i].LBPolicies = []ir.LBPolicy{ir.LBRoundRobin}
		}
		var err error
		if outs[k], err = tr.Translate(m); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name  string
		class string
		keys  int
	}{
		{"newest/keys=1", "", 1}, {"newest/keys=10", "", 10},
		{"envoy1.22/keys=1", "\x1e1.22", 1}, {"envoy1.22/keys=10", "\x1e1.22", 10},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := NewServer(ServerConfig{Logger: zerolog.Nop()})
			resolve := func(string) string { return "" }
			ctx := context.Background()
			if _, err := s.Update(ctx, outs[0], resolve); err != nil {
				b.Fatal(err)
			}
			for k := range bc.keys {
				s.sawNode(fmt.Sprintf("group-%d%s", k, bc.class))
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				changed, err := s.Update(ctx, outs[i%2], resolve)
				if err != nil || len(changed) != 1 {
					b.Fatalf("changed %v, err %v", changed, err)
				}
			}
		})
	}
}
