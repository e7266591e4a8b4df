package adsclient

import (
	"maps"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestStateKeepsWhatArrived: every resource the client holds has the Any
// it arrived in, which decodes to exactly the resource held, and nothing
// else does: a resource gone from the state (web, in both protocol
// variants, SotW's full-state CDS and subset EDS included) takes its
// encoding with it. An agent serves those bytes again (xds.Resources.Encoded).
func TestStateKeepsWhatArrived(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			srv := startServer(t)
			c := dial(t, srv, Config{Cluster: "test", Mode: mode})
			ctx := waitCtx(t)
			check := func(st State) {
				t.Helper()
				for typ, ts := range st.Types {
					if got, want := slices.Sorted(maps.Keys(ts.Encoded)), slices.Sorted(maps.Keys(ts.Resources)); !slices.Equal(got, want) {
						t.Errorf("%s: encodings of %v, resources %v", shortType(typ), got, want)
					}
					for name, a := range ts.Encoded {
						m, err := a.UnmarshalNew()
						if err != nil {
							t.Fatalf("%s %q: %v", shortType(typ), name, err)
						}
						if !proto.Equal(m, ts.Resources[name]) {
							t.Errorf("%s %q: the encoding kept is not the resource held", shortType(typ), name)
						}
					}
				}
			}
			srv.set(t, makeSnapshot(t, "1", map[string][]string{"api": {"10.0.0.1:8080"}, "web": {"10.0.1.1:80"}}))
			st, err := c.Wait(ctx, func(s State) bool {
				return len(s.Endpoints("api")) == 1 && len(s.Endpoints("web")) == 1 && s.RouteConfig("local_route") != nil
			})
			if err != nil {
				t.Fatal(err)
			}
			check(st)
			srv.set(t, makeSnapshot(t, "2", map[string][]string{"api": {"10.0.0.1:8080", "10.0.0.2:8080"}}))
			if st, err = c.Wait(ctx, func(s State) bool {
				return len(s.Endpoints("api")) == 2 && s.Cluster("web") == nil && s.Endpoints("web") == nil
			}); err != nil {
				t.Fatal(err)
			}
			check(st)
		})
	}
}
