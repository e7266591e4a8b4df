package xds

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Marshal once per snapshot, not once per stream.
//
// go-control-plane's snapshot cache builds a new RawResponse for every
// watch it answers, with a new cachedResource per resource, so every
// stream marshals every resource it is sent again: a SotW EDS push of 100
// clusters to 1000 proxies marshals the same 100 ClusterLoadAssignments
// 1000 times. The load harness found that to be half the server's CPU per
// change (docs/scaling.md, "Bottlenecks").
//
// Here each resource of the current translation is marshalled at most
// once (marshalCache, keyed by resource pointer: resources are immutable
// once translated, and snapshots of all keys share them), and the bytes
// serve three purposes:
//
//   - the content version of each type (contentVersionWith), which used to
//     marshal everything once more per Update;
//   - the snapshots' delta version maps (servedSnapshot, hashed once per
//     Update and shared by all keys, only once a delta watch asks), which
//     go-control-plane would otherwise compute by marshalling and hashing
//     every resource again for every snapshot key with delta watches;
//   - SotW responses: shareCache hands the server sharedResponses, whose
//     resources are *anypb.Any values shared by all streams. Only the
//     DiscoveryResponse around them (version, nonce, resource list) is per
//     stream.
//
// Memory is bounded by what is served: every Update starts a new
// generation holding the current translation's resources and those of
// snapshots still in the cache (a key whose versions did not change keeps
// its older snapshot); entries of resources the previous generation held
// (same pointer) are kept, the rest dropped. A response built after its resources left
// the cache (a newer Update came in between) marshals them itself, as
// go-control-plane would.

// marshalCache holds the marshalled form of the current translation's
// resources.
type marshalCache struct {
	cur atomic.Pointer[marshalGen]
}

// marshalGen is one translation's entries. The map is never written after
// it is published.
type marshalGen struct {
	entries map[types.Resource]*marshalEntry
}

type marshalEntry struct {
	typeURL string
	res     types.Resource

	once  sync.Once
	bytes []byte
	any   *anypb.Any
	err   error

	hashOnce sync.Once
	hash     string // go-control-plane's HashResource of bytes (delta versions)
}

func (e *marshalEntry) load() (*marshalEntry, error) {
	e.once.Do(func() {
		b, err := cachev3.MarshalResource(e.res)
		if err != nil {
			e.err = fmt.Errorf("marshal %s %q: %w", e.typeURL, cachev3.GetResourceName(e.res), err)
			return
		}
		e.bytes = b
		e.any = &anypb.Any{TypeUrl: e.typeURL, Value: b}
	})
	return e, e.err
}

// next publishes a generation for the resource sets still served: the
// current translation's and those of snapshots still in the cache.
// Entries of resources the current generation already holds are kept, all
// others are dropped. Nothing is marshalled here; entries marshal on first
// use.
func (c *marshalCache) next(sets []*Resources) *marshalGen {
	prev := c.cur.Load()
	gen := &marshalGen{entries: map[types.Resource]*marshalEntry{}}
	seen := map[*Resources]bool{}
	for _, r := range sets {
		if r == nil || seen[r] {
			continue
		}
		seen[r] = true
		for typ, items := range r.ByType() {
			for _, res := range items {
				if _, ok := gen.entries[res]; ok {
					continue
				}
				if prev != nil {
					if e, ok := prev.entries[res]; ok && e.typeURL == typ {
						gen.entries[res] = e
						continue
					}
				}
				gen.entries[res] = &marshalEntry{typeURL: typ, res: res}
			}
		}
	}
	c.cur.Store(gen)
	return gen
}

// entry returns the loaded entry of res as typeURL, nil if the current
// generation does not hold it.
func (g *marshalGen) entry(typeURL string, res types.Resource) (*marshalEntry, error) {
	if g == nil {
		return nil, nil
	}
	e, ok := g.entries[res]
	if !ok || e.typeURL != typeURL {
		return nil, nil
	}
	return e.load()
}

// marshalAppend returns the deterministic encoding of res: the cached one
// if the generation holds it (cached), else appended to buf[:0].
func (g *marshalGen) marshalAppend(buf []byte, typeURL string, res types.Resource) (b []byte, cached bool, err error) {
	e, err := g.entry(typeURL, res)
	if err != nil {
		return nil, false, err
	}
	if e != nil {
		return e.bytes, true, nil
	}
	b, err = proto.MarshalOptions{Deterministic: true}.MarshalAppend(buf[:0], res)
	return b, false, err
}

// hash returns go-control-plane's resource version (HashResource) of res.
func (g *marshalGen) hash(typeURL string, res types.Resource) (string, error) {
	e, err := g.entry(typeURL, res)
	if err != nil {
		return "", err
	}
	if e != nil {
		e.hashOnce.Do(func() { e.hash = cachev3.HashResource(e.bytes) })
		return e.hash, nil
	}
	b, err := cachev3.MarshalResource(res)
	if err != nil {
		return "", err
	}
	return cachev3.HashResource(b), nil
}

// versionMap is the delta version map of items (name -> HashResource), the
// same map Snapshot.ConstructVersionMap would compute.
func (g *marshalGen) versionMap(typeURL string, items []types.Resource) (map[string]string, error) {
	m := make(map[string]string, len(items))
	for _, r := range items {
		h, err := g.hash(typeURL, r)
		if err != nil {
			return nil, err
		}
		m[cachev3.GetResourceName(r)] = h
	}
	return m, nil
}

// lazyVersionMap is a delta version map shared by the snapshots of all
// keys that serve the same resources, hashed the first time
// go-control-plane asks for it: only keys with delta watches ever do.
type lazyVersionMap struct {
	mc      *marshalCache
	typeURL string
	items   []types.Resource

	once sync.Once
	m    map[string]string
	err  error
}

func (l *lazyVersionMap) get() (map[string]string, error) {
	l.once.Do(func() { l.m, l.err = l.mc.cur.Load().versionMap(l.typeURL, l.items) })
	return l.m, l.err
}

// servedSnapshot is a snapshot whose delta version maps come from the
// lazyVersionMaps shared between keys, instead of
// Snapshot.ConstructVersionMap marshalling and hashing every resource
// again for each key. go-control-plane calls ConstructVersionMap with its
// lock held, before it reads VersionMap.
type servedSnapshot struct {
	*cachev3.Snapshot
	maps map[string]*lazyVersionMap // type URL -> map
	// sets are the resource sets it was built from (shared, group).
	sets []*Resources
}

var _ cachev3.ResourceSnapshot = (*servedSnapshot)(nil)

func (s *servedSnapshot) ConstructVersionMap() error {
	if s.VersionMap != nil {
		return nil
	}
	vm := make(map[string]map[string]string, int(types.UnknownType))
	for i := range types.UnknownType {
		typ, err := cachev3.GetResponseTypeURL(i)
		if err != nil {
			return err
		}
		if l := s.maps[typ]; l != nil {
			m, err := l.get()
			if err != nil {
				return err
			}
			vm[typ] = m
			continue
		}
		if n := len(s.Resources[i].Items); n > 0 {
			// Not a type the server fills in: go-control-plane's way.
			return s.Snapshot.ConstructVersionMap()
		}
		vm[typ] = map[string]string{}
	}
	s.VersionMap = vm
	return nil
}

// sharedResponse is a SotW response whose resources are the shared,
// already marshalled Anys of the current generation. Everything but
// GetDiscoveryResponse is the RawResponse's.
type sharedResponse struct {
	*cachev3.RawResponse
	mc *marshalCache

	once sync.Once
	out  *discoveryv3.DiscoveryResponse
	err  error
}

var _ cachev3.Response = (*sharedResponse)(nil)

// GetDiscoveryResponse builds the response once (the server sets its
// nonce, so it must not be shared), from shared Anys. It runs on the
// stream's goroutine, like go-control-plane's own marshalling.
func (r *sharedResponse) GetDiscoveryResponse() (*discoveryv3.DiscoveryResponse, error) {
	r.once.Do(func() { r.out, r.err = r.build() })
	return r.out, r.err
}

func (r *sharedResponse) build() (*discoveryv3.DiscoveryResponse, error) {
	if r.Heartbeat {
		return r.RawResponse.GetDiscoveryResponse()
	}
	typeURL := r.GetRequest().GetTypeUrl()
	raw := r.GetRawResources()
	gen := r.mc.cur.Load()
	anys := make([]*anypb.Any, 0, len(raw))
	for _, res := range raw {
		if res.TTL != nil {
			// TTL resources are wrapped per response; the bridge sets
			// none, but keep go-control-plane's behaviour if one appears.
			return r.RawResponse.GetDiscoveryResponse()
		}
		e, err := gen.entry(typeURL, res.Resource)
		if err != nil {
			return nil, err
		}
		if e != nil {
			anys = append(anys, e.any)
			continue
		}
		b, err := cachev3.MarshalResource(res.Resource)
		if err != nil {
			return nil, fmt.Errorf("processing %s: %w", cachev3.GetResourceName(res.Resource), err)
		}
		anys = append(anys, &anypb.Any{TypeUrl: typeURL, Value: b})
	}
	return &discoveryv3.DiscoveryResponse{
		VersionInfo: r.Version,
		Resources:   anys,
		TypeUrl:     typeURL,
	}, nil
}

// shareCache is the snapshot cache with SotW responses turned into
// sharedResponses.
//
// The cache sends its responses on the channel a watch was created with,
// and the server sends whatever it reads there. So each SotW watch gets a
// private channel of its own; shareCache moves a response from there to
// the server's channel, wrapped, at the only two moments the cache
// answers a watch: within CreateWatch (an immediate answer, or one from a
// SetSnapshot that raced it) and within SetSnapshot. Both are
// synchronous, so no goroutine is needed, and order is what the cache
// produced. A watch cancelled before SetSnapshot's sweep reaches it is
// dropped from the sweep under the same lock, so a cancelled watch never
// delivers — as with the cache itself, whose answer to a cancelled watch
// the server would drop. (Responses the cache would send outside these
// two moments — TTL heartbeats — wait for the next SetSnapshot of the
// key; the bridge sets no TTLs.)
//
// Delta watches pass through: a delta response carries only the resources
// that changed, and their versions come from the shared version maps.
type shareCache struct {
	cachev3.SnapshotCache
	mc *marshalCache

	mu      sync.Mutex
	pending map[string]map[*pendingWatch]struct{} // snapshot key -> open SotW watches
}

type pendingWatch struct {
	priv chan cachev3.Response // the cache answers here
	out  chan cachev3.Response // the server reads here
}

var _ cachev3.SnapshotCache = (*shareCache)(nil)

func newShareCache(c cachev3.SnapshotCache, mc *marshalCache) *shareCache {
	return &shareCache{SnapshotCache: c, mc: mc, pending: map[string]map[*pendingWatch]struct{}{}}
}

func (c *shareCache) wrap(r cachev3.Response) cachev3.Response {
	if raw, ok := r.(*cachev3.RawResponse); ok {
		return &sharedResponse{RawResponse: raw, mc: c.mc}
	}
	return r
}

func (c *shareCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	key := nodeClusterHash{}.ID(req.GetNode())
	pw := &pendingWatch{priv: make(chan cachev3.Response, 1), out: ch}
	c.mu.Lock()
	cancel, err := c.SnapshotCache.CreateWatch(req, sub, pw.priv)
	if err != nil {
		c.mu.Unlock()
		return cancel, err
	}
	select {
	case r := <-pw.priv:
		// Answered at once (or by a SetSnapshot right after the watch
		// was registered): the watch is spent. The caller is the stream
		// itself, which reads ch after this returns.
		c.mu.Unlock()
		ch <- c.wrap(r)
		return cancel, nil
	default:
	}
	ws := c.pending[key]
	if ws == nil {
		ws = map[*pendingWatch]struct{}{}
		c.pending[key] = ws
	}
	ws[pw] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.dropLocked(key, pw)
		c.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	}, nil
}

func (c *shareCache) dropLocked(key string, pw *pendingWatch) {
	ws := c.pending[key]
	delete(ws, pw)
	if len(ws) == 0 {
		delete(c.pending, key)
	}
}

// SetSnapshot sets the snapshot, then hands the answers it produced to
// their streams.
func (c *shareCache) SetSnapshot(ctx context.Context, key string, snap cachev3.ResourceSnapshot) error {
	err := c.SnapshotCache.SetSnapshot(ctx, key, snap)
	c.flush(key)
	return err
}

func (c *shareCache) flush(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pw := range c.pending[key] {
		select {
		case r := <-pw.priv:
			c.dropLocked(key, pw)
			// Blocks only if the stream's channel is full, as the cache's
			// own send would (it holds its lock while sending).
			pw.out <- c.wrap(r)
		default:
		}
	}
}
