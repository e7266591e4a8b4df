package bridge

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// The proxyless gRPC mesh in the daemon (ir/meshgrpc.go): with the mesh
// on, the bridge follows which services are Connect-native (a blocking
// query on the catalog's service list, filtered as Consul filters it),
// watches their health like any other service, and adds their gRPC
// servers and mesh gRPC clusters to each model (model.AddMeshGRPC).

// nativeFilter selects Connect-native registrations
// (connect { native = true }) in /v1/catalog/services.
const nativeFilter = "ServiceConnect.Native == true"

// watchNatives sends the sorted names of the Connect-native services
// each time they change, following Consul's index rules (reset when the
// index goes back, a floor between queries, jittered backoff on errors).
func watchNatives(ctx context.Context, client *api.Client, q consul.QueryOptions, log zerolog.Logger, out chan<- []string) {
	wait := cmpOr(q.WaitTime, 60*time.Second)
	floor := cmpOr(q.MinInterval, 50*time.Millisecond)
	backoff := cmpOr(q.BackoffInitial, 250*time.Millisecond)
	var index uint64
	var last []string
	for ctx.Err() == nil {
		start := time.Now()
		opts := (&api.QueryOptions{Filter: nativeFilter, WaitIndex: index, WaitTime: wait, AllowStale: q.Stale, Datacenter: q.Datacenter}).WithContext(ctx)
		svcs, meta, err := client.Catalog().Services(opts)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn().Err(err).Msg("cannot list Connect-native services; the proxyless gRPC mesh keeps what it has")
			sleep(ctx, backoff/2+rand.N(backoff/2+1))
			backoff = min(2*backoff, cmpOr(q.BackoffMax, 30*time.Second))
			continue
		}
		backoff = cmpOr(q.BackoffInitial, 250*time.Millisecond)
		if meta.LastIndex < index {
			index = 0 // Consul's index went back (a snapshot restore): start over
		} else {
			index = meta.LastIndex
		}
		names := slices.Sorted(maps.Keys(svcs))
		if last == nil || !slices.Equal(names, last) {
			last = names
			select {
			case out <- names:
			case <-ctx.Done():
				return
			}
		}
		sleep(ctx, floor-time.Since(start))
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// meshTargets is what the catalog watcher follows: the policy's and the
// mesh's services, and the Connect-native ones.
func (l *loop) meshTargets(p *policy.Policy) consul.Targets {
	t := l.mesh.watchTargets(p)
	for _, n := range l.natives {
		t.Services = append(t.Services, consul.ServiceKey{Name: n})
	}
	return t
}

// addMeshGRPC adds the Connect-native services' gRPC servers to m, with
// the default intention the sidecars get (the policy's mesh
// default_intention, else Consul's ACL default, else allow).
func (l *loop) addMeshGRPC(cat *consul.Catalog, m *ir.Model) []string {
	if len(l.natives) == 0 || cat == nil || cat.Mesh == nil {
		return nil
	}
	def := cat.Mesh.DefaultIntention
	if pm := l.policy.Mesh; pm != nil && pm.DefaultIntention != "" {
		def = pm.DefaultIntention
	}
	if def == "" {
		def = ir.IntentionAllow
	}
	// "" takes the datacenter the instances' health entries name.
	in, warnings := model.MeshGRPCFromCatalog(cat, l.d.cfg.Settings.Consul.Datacenter, l.natives, def)
	return append(warnings, model.AddMeshGRPC(m, in)...)
}
