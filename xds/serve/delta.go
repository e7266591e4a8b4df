package serve

import (
	"context"
	"strconv"
	"sync"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/protobuf/proto"
)

// The bridge's delta xDS server (ADS and the per-type services).
//
// go-control-plane's delta server reads requests in one goroutine and
// hands each to the stream's handler goroutine, which also sends the
// responses: every ACK wakes two goroutines and crosses a channel, and
// every response sits in a second channel first. With one push per proxy
// per change that hop is a fixed cost per proxy (issue 19). Here the
// handler goroutine reads and acts on each request itself (callbacks,
// subscription, watch), and the cache queues answers on the stream
// (deliver) for a sending goroutine that runs only while answers wait
// (outbox.go).
//
// The protocol is go-control-plane's: legacy wildcard subscriptions, one
// subscription per type with the versions the stream holds, a stream
// nonce per response, and a request of a type replacing that type's
// watch. The callbacks see a stream as they did: open, each request
// before it is acted on, each response before it is sent, close after
// every watch is cancelled; never a request after close.
type deltaServer struct{ adsServer }

// deltaStream is one stream's state.
type deltaStream struct {
	adsStream[cachev3.DeltaResponse]
	d       *deltaServer
	str     stream.DeltaStream
	typeURL string // a per-type service's type (resourcev3.AnyType for ADS)
	// req is where every request of the stream is read (readRequest):
	// gRPC's generated Recv allocates one per read, eight a proxy at a
	// fleet's connect, spread among the spans long-lived state then kept
	// half-empty. Nothing keeps a request past its handling (the cache
	// keeps its node and what it asked: cache.asked; the tracker keeps
	// strings), and every decode starts from an empty message
	// (proto.Unmarshal, the node memo's proto.Reset).
	req discoveryv3.DeltaDiscoveryRequest
}

func newDeltaServer(ctx context.Context, cache *cache.Cache, cb *callbacks) *deltaServer {
	return &deltaServer{adsServer{ender: newStreamEnder(ctx), cache: cache, cb: cb}}
}

// serve runs one delta stream; defaultTypeURL is the type of a per-type
// service (resourcev3.AnyType for ADS).
func (d *deltaServer) serve(str stream.DeltaStream, defaultTypeURL string) error {
	st := &deltaStream{d: d, str: str, typeURL: defaultTypeURL}
	st.init(d.ids.Add(1))
	d.checkEndable(str.Context())
	return runStreamOps(&st.adsStream, d.ender, str.Context(), streamOps[*discoveryv3.DeltaDiscoveryRequest, cachev3.DeltaResponse](st), d.senders)
}

func (st *deltaStream) streamOpened(ctx context.Context) error {
	return st.d.cb.OnDeltaStreamOpen(ctx, st.id, st.typeURL)
}

func (st *deltaStream) streamContext() context.Context { return st.str.Context() }

func (st *deltaStream) streamClosed(node *corev3.Node) { st.d.cb.OnDeltaStreamClosed(st.id, node) }

func (st *deltaStream) readRequest() (*discoveryv3.DeltaDiscoveryRequest, error) {
	if err := st.str.RecvMsg(&st.req); err != nil {
		return nil, err
	}
	return &st.req, nil
}

// deltaResponses are the messages pushes are sent from (cache's
// DeltaResponse.Fill): a message is done with once gRPC's Send returns (the
// codec has encoded it, sharing nothing of it), so each goes back here,
// emptied, rather than a new one being made for every push to every
// proxy.
var deltaResponses = sync.Pool{New: func() any { return new(discoveryv3.DeltaDiscoveryResponse) }}

func (st *deltaStream) sendAnswer(r cachev3.DeltaResponse, nonce int64) error {
	dr, ok := r.(*cache.DeltaResponse)
	if !ok {
		resp, err := r.GetDeltaDiscoveryResponse()
		if err != nil {
			return err
		}
		return st.sendResponse(resp, nonce)
	}
	resp := deltaResponses.Get().(*discoveryv3.DeltaDiscoveryResponse)
	defer func() {
		proto.Reset(resp) // keeps nothing of this push
		deltaResponses.Put(resp)
	}()
	dr.Fill(resp)
	return st.sendResponse(resp, nonce)
}

func (st *deltaStream) sendResponse(resp *discoveryv3.DeltaDiscoveryResponse, nonce int64) error {
	resp.Nonce = strconv.FormatInt(nonce, 10)
	// The bridge's callbacks read the response only; a response does not
	// keep its request (cache.asked).
	st.d.cb.OnStreamDeltaResponse(st.id, nil, resp)
	return st.str.Send(resp)
}

// TakeDelta queues an answer of one of the stream's watches
// (cache.DeltaSink).
func (st *deltaStream) TakeDelta(sub cachev3.Subscription, r cachev3.DeltaResponse) {
	st.deliver(sub.(*cache.Subscription), r.GetNextVersionMap(), r)
}

// actOn acts on one request, in the handler goroutine.
func (st *deltaStream) actOn(req *discoveryv3.DeltaDiscoveryRequest) error {
	if req == nil {
		return errEmptyRequest
	}
	// Before the node and type are filled in, as go-control-plane's.
	if err := st.d.cb.OnStreamDeltaRequest(st.id, req); err != nil {
		return err
	}
	req.Node = st.nodeFor(req.GetNode())
	typ, err := typeFor(req.GetTypeUrl(), st.typeURL)
	if err != nil {
		return err
	}
	req.TypeUrl = typ
	// Names with a NUL are never unsubscribed: go-control-plane records
	// an unsubscribed name of a wildcard stream as held at version "",
	// and a client must not write the bridge's marks there (cache.ClientName).
	subscribe, unsubscribe := req.GetResourceNamesSubscribe(), cache.ClientNames(req.GetResourceNamesUnsubscribe())
	// The type's first request: initial versions (a reconnecting
	// client's) count only here; no names means the legacy wildcard.
	w, old := st.watchFor(typ, func(w *typeWatch) {
		w.delta = st.d.cache.NewDeltaWatchOf(uint64(st.id), subscribe, unsubscribe, cache.ClientVersions(req.GetInitialResourceVersions()), st)
	})
	if old {
		// Cancelled first: the cache touches the subscription only while
		// a watch is filed, under the lock the cancel takes.
		w.cancel()
		if len(unsubscribe) > 0 {
			cache.OwnHeld(w.subscription()) // unsubscribing edits what it holds
		}
		w.subscription().Update(subscribe, unsubscribe)
	}
	w.delta.File(req)
	return nil
}

// xdsServer answers the ADS and per-type services with the bridge's
// servers; go-control-plane's (embedded) is left the REST fetches, which
// the cache refuses.
type xdsServer struct {
	serverv3.Server
	delta *deltaServer
	sotw  *sotwServer
}

// newXDSServer's servers send through senders (nil: a goroutine per
// sending turn).
func newXDSServer(ctx context.Context, cache *cache.Cache, cb *callbacks, senders *sendPool) *xdsServer {
	x := &xdsServer{Server: serverv3.NewServer(ctx, cache, cb),
		delta: newDeltaServer(ctx, cache, cb), sotw: newSotwServer(ctx, cache, cb)}
	x.delta.senders, x.sotw.senders = senders, senders
	return x
}

func (s *xdsServer) StreamAggregatedResources(str discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return s.sotw.serve(str, resourcev3.AnyType)
}

func (s *xdsServer) StreamClusters(str clusterservice.ClusterDiscoveryService_StreamClustersServer) error {
	return s.sotw.serve(str, resourcev3.ClusterType)
}

func (s *xdsServer) StreamEndpoints(str endpointservice.EndpointDiscoveryService_StreamEndpointsServer) error {
	return s.sotw.serve(str, resourcev3.EndpointType)
}

func (s *xdsServer) StreamListeners(str listenerservice.ListenerDiscoveryService_StreamListenersServer) error {
	return s.sotw.serve(str, resourcev3.ListenerType)
}

func (s *xdsServer) StreamRoutes(str routeservice.RouteDiscoveryService_StreamRoutesServer) error {
	return s.sotw.serve(str, resourcev3.RouteType)
}

func (s *xdsServer) StreamSecrets(str secretservice.SecretDiscoveryService_StreamSecretsServer) error {
	return s.sotw.serve(str, resourcev3.SecretType)
}

func (s *xdsServer) DeltaAggregatedResources(str discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return s.delta.serve(str, resourcev3.AnyType)
}

func (s *xdsServer) DeltaClusters(str clusterservice.ClusterDiscoveryService_DeltaClustersServer) error {
	return s.delta.serve(str, resourcev3.ClusterType)
}

func (s *xdsServer) DeltaEndpoints(str endpointservice.EndpointDiscoveryService_DeltaEndpointsServer) error {
	return s.delta.serve(str, resourcev3.EndpointType)
}

func (s *xdsServer) DeltaListeners(str listenerservice.ListenerDiscoveryService_DeltaListenersServer) error {
	return s.delta.serve(str, resourcev3.ListenerType)
}

func (s *xdsServer) DeltaRoutes(str routeservice.RouteDiscoveryService_DeltaRoutesServer) error {
	return s.delta.serve(str, resourcev3.RouteType)
}

func (s *xdsServer) DeltaSecrets(str secretservice.SecretDiscoveryService_DeltaSecretsServer) error {
	return s.delta.serve(str, resourcev3.SecretType)
}
