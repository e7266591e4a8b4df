// Package xds turns the bridge's model into Envoy xDS resources (Translate,
// pure, one builder per resource type, every resource validated), and
// generates bootstraps. Serving them over ADS is xds/serve's; composing
// this stage with the model is package pipeline's.
package xds

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Resources are the xDS resources of one snapshot, each slice sorted by name.
type Resources struct {
	Clusters  []*clusterv3.Cluster
	Endpoints []*endpointv3.ClusterLoadAssignment
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
	// Secrets are SDS secrets (TLS certificates with their keys, CAs).
	// A proxy gets the shared ones and its group's in one SDS type.
	Secrets []*tlsv3.Secret
	// RouteSources says where the policy declares each route, by route
	// configuration and route name ("edge.http/shop/0" ->
	// "edge.hcl:12:7"). It is in no resource, so moving a route in its
	// file changes no version; the config dump shows it.
	RouteSources map[string]string
	// Encoded, when set, holds the bytes some of these resources arrived
	// in, by resource: an agent relays what the central bridge sent, and
	// its serving sets and saved state take the central's encoding
	// instead of encoding every relayed resource again. Only for a
	// resource decoded from exactly those bytes.
	Encoded map[proto.Message]*anypb.Any
}

// addRouteSources records where l's routes are declared.
func (r *Resources) addRouteSources(l *ir.Listener) {
	for _, vh := range l.VirtualHosts {
		for _, rt := range vh.Routes {
			if r.RouteSources == nil {
				r.RouteSources = map[string]string{}
			}
			r.RouteSources[l.Name+"/"+rt.Name] = rt.Source
		}
	}
}

// ByType returns the resources keyed by type URL, the shape go-control-plane
// snapshots take.
func (r *Resources) ByType() map[string][]types.Resource {
	out := map[string][]types.Resource{
		resourcev3.ClusterType:  make([]types.Resource, 0, len(r.Clusters)),
		resourcev3.EndpointType: make([]types.Resource, 0, len(r.Endpoints)),
		resourcev3.ListenerType: make([]types.Resource, 0, len(r.Listeners)),
		resourcev3.RouteType:    make([]types.Resource, 0, len(r.Routes)),
		resourcev3.SecretType:   make([]types.Resource, 0, len(r.Secrets)),
	}
	for _, c := range r.Clusters {
		out[resourcev3.ClusterType] = append(out[resourcev3.ClusterType], c)
	}
	for _, e := range r.Endpoints {
		out[resourcev3.EndpointType] = append(out[resourcev3.EndpointType], e)
	}
	for _, l := range r.Listeners {
		out[resourcev3.ListenerType] = append(out[resourcev3.ListenerType], l)
	}
	for _, rc := range r.Routes {
		out[resourcev3.RouteType] = append(out[resourcev3.RouteType], rc)
	}
	for _, sc := range r.Secrets {
		out[resourcev3.SecretType] = append(out[resourcev3.SecretType], sc)
	}
	return out
}

// Output is a translated model: every cluster, endpoint and upstream
// secret (Shared), what each kind of node gets of them (Reach,
// ProxylessReach, Unmatched), and listeners and routes per proxy group.
type Output struct {
	// Shared holds every cluster, load assignment and upstream secret the
	// bridge serves; no node gets all of it (Unmatched may get all but
	// the secrets).
	Shared *Resources
	// Reach holds, by proxy group, the clusters, endpoints and upstream
	// secrets the group's proxies get: a selection of Shared's objects.
	// Groups with the same clusters share one Resources.
	Reach map[string]*Resources
	// ProxylessReach is what a proxyless gRPC client in no proxyless
	// group gets of Shared: the clusters its API listeners reach, no
	// secrets.
	ProxylessReach *Resources
	// Unmatched is what a node in no group gets of Shared: nothing, or
	// every cluster and its endpoints (never a secret).
	Unmatched *Resources
	// UnmatchedNone says nodes in no group are served nothing by policy
	// (unmatched_nodes = "none"), which serving shows as NO_GROUP.
	UnmatchedNone bool
	// Groups holds listeners and routes by proxy group name. A group
	// declared proxyless maps to Proxyless itself (the same pointer), or
	// to the part of it its upstreams narrow it to, so its nodes get API
	// listeners whatever user agent they announce.
	Groups map[string]*Resources
	// Proxyless holds the API listeners and routes served to proxyless
	// gRPC clients instead of a group's; nil when ProxylessFailed is set.
	Proxyless *Resources
	// Failed holds, by proxy group, why a group's listeners, routes or
	// secrets could not be served this time (they fail Envoy's validation
	// or the consistency check). A failed group is not in Groups: serving
	// keeps what its proxies had, while every other group updates. A group
	// declared proxyless fails with ProxylessFailed.
	Failed map[string]error
	// ProxylessFailed is why the proxyless resources could not be served.
	ProxylessFailed error
	// ProxylessGroups names the groups declared proxyless, failed or not.
	ProxylessGroups map[string]bool
	// MeshSecretsExternal says listeners and clusters name the mesh's
	// leaves and roots without the bridge serving them: the per-VM agent
	// does, from its local Consul agent, unless the mesh is central
	// (ir.Mesh.Central). See ExternalSecrets.
	MeshSecretsExternal bool
}

// ExternalSecrets says which SDS secrets the output's listeners and
// clusters may name without the bridge serving them, for serving and
// ConsistentExcept; nil when the bridge serves every one.
func (o *Output) ExternalSecrets() func(name string) bool {
	if o.MeshSecretsExternal {
		return ir.IsMeshSecret
	}
	return nil
}

// Translate builds the xDS resources for a model. It is pure. Every
// resource passes Envoy's own validation (ValidateAll) and what each proxy
// gets is consistent (consistency.go), or is not returned: a failure in
// the clusters, endpoints or shared secrets every proxy gets is an error
// (the caller keeps serving what it had rather than push something Envoy
// rejects); a failure in one group's resources fails that group only
// (Output.Failed).
func Translate(m *ir.Model) (*Output, error) { return NewTranslator().Translate(m) }

// Translator is Translate with a memory of its last output: a cluster or
// listener equal to last time's gets last time's resources (the same
// objects, already validated), so a change to one service rebuilds one
// cluster and its endpoints, not the world, and the serving cache finds
// the unchanged resources by identity without marshalling them again.
// The result is what Translate returns. Models must not be modified
// after they are translated. Not safe for concurrent use.
type Translator struct {
	clusters  map[string]memoCluster
	listeners map[string]memoListener // group name + "/" + listener name
	secrets   map[string]memoSecret   // scope ("" shared, else group) + "/" + name
	// sharedChecked: the last output's shared resources passed the
	// consistency check; sharedSecrets is how many shared secrets it had.
	// With the same clusters (objects and names) and secrets, only
	// endpoint contents can differ, which cannot make it inconsistent.
	sharedChecked bool
	sharedSecrets int
	// refs are the references of every cluster and listener of the last
	// output, by object: the consistency check of an unchanged object is
	// a lookup, not an unmarshal of its filters and sockets.
	refs map[types.Resource]references
	// proxyless is the last proxyless model and its resources.
	proxylessIn  []ir.Listener
	proxylessOut *Resources
	meshGRPCIn   []ir.MeshGRPCServer // with proxylessIn: what proxylessOut was built from
	// reachMemo is the last translation's reach sets (reach.go);
	// goodReach the cluster names each group (and the proxyless clients)
	// had when it last translated cleanly.
	reachMemo map[string]*Resources
	goodReach map[string][]string
	// last is the last successful translation (endpointsonly.go).
	last *lastTranslation
}

type memoCluster struct {
	in       ir.Cluster
	cluster  *clusterv3.Cluster
	endpoint *endpointv3.ClusterLoadAssignment
}

type memoSecret struct {
	in  ir.Secret
	out *tlsv3.Secret
}

// secret is the Envoy secret of sec in scope, last time's if unchanged;
// a new one is added to fresh (to validate) and every one to next.
func (t *Translator) secret(scope string, sec *ir.Secret, next map[string]memoSecret, fresh *Resources) *tlsv3.Secret {
	key := scope + "/" + sec.Name
	ms, ok := t.secrets[key]
	if !ok || ms.in.Name != sec.Name || !bytes.Equal(ms.in.CertificateChain, sec.CertificateChain) ||
		!bytes.Equal(ms.in.PrivateKey, sec.PrivateKey) || !bytes.Equal(ms.in.TrustedCA, sec.TrustedCA) {
		ms = memoSecret{in: *sec, out: buildSecret(sec)}
		fresh.Secrets = append(fresh.Secrets, ms.out)
	}
	next[key] = ms
	return ms.out
}

type memoListener struct {
	in       ir.Listener
	role     meshRole
	listener *listenerv3.Listener
	route    *routev3.RouteConfiguration // nil for tcp
}

// NewTranslator returns a Translator with an empty memory.
func NewTranslator() *Translator { return &Translator{} }

// Fork returns a Translator that starts with t's memory and never changes
// t's: Translate builds new maps and only reads the old ones, so a copy of
// the fields is a copy of the memory, but for the clusters' memory, which
// TranslateEndpoints changes in place and so is copied. The reload gate
// translates a candidate policy with a fork; a rejected one leaves the
// memo and the last good reach (reach.go) the daemon serves from
// untouched.
func (t *Translator) Fork() *Translator {
	c := *t
	c.clusters = maps.Clone(t.clusters)
	return &c
}

// Translate is the package's Translate, reusing what did not change since
// the last successful call.
func (t *Translator) Translate(m *ir.Model) (*Output, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	clusters := make(map[string]memoCluster, len(m.Clusters))
	listeners := map[string]memoListener{}
	secrets := map[string]memoSecret{}
	rbacs := rbacMemo{}
	out := &Output{Shared: &Resources{}, Groups: map[string]*Resources{}}
	fresh := &Resources{} // built this time: validated below
	sameNames := len(m.Clusters) == len(t.clusters)
	for i := range m.Clusters {
		c := m.Clusters[i]
		mc, ok := t.clusters[c.Name]
		sameNames = sameNames && ok
		if !ok || !mc.in.SettingsEqual(c) {
			mc.cluster = buildCluster(c)
			fresh.Clusters = append(fresh.Clusters, mc.cluster)
		}
		eps := mc.in.Endpoints
		if c.OriginalDestination || len(c.Aggregate) > 0 {
			// No EDS: Envoy connects where the connection was headed, or
			// through the aggregate's clusters.
			mc.endpoint = nil
		} else if !ok || !slices.Equal(eps, c.Endpoints) || mc.endpoint == nil {
			mc.endpoint = buildLoadAssignment(c)
			fresh.Endpoints = append(fresh.Endpoints, mc.endpoint)
			eps = slices.Clone(c.Endpoints)
		}
		mc.in = *c
		mc.in.Endpoints = eps
		clusters[c.Name] = mc
		out.Shared.Clusters = append(out.Shared.Clusters, mc.cluster)
		if mc.endpoint != nil {
			out.Shared.Endpoints = append(out.Shared.Endpoints, mc.endpoint)
		}
	}
	for i := range m.Secrets {
		out.Shared.Secrets = append(out.Shared.Secrets, t.secret("", &m.Secrets[i], secrets, fresh))
	}
	refs := map[types.Resource]references{}
	ref := func(r types.Resource) references {
		v, ok := refs[r]
		if !ok {
			if v, ok = t.refs[r]; !ok {
				v = refsOf(r)
			}
			refs[r] = v
		}
		return v
	}
	sharedErr := validateAll(fresh)
	if !t.sharedChecked || !sameNames || len(fresh.Clusters)+len(fresh.Secrets) > 0 || len(m.Secrets) != t.sharedSecrets {
		sharedErr = errors.Join(sharedErr, sharedConsistent(out.Shared, ref))
	}
	if sharedErr != nil {
		return nil, sharedErr
	}
	out.Failed = map[string]error{}
	sharedClusters := clusterNameSet(out.Shared)
	out.MeshSecretsExternal = m.MeshSecretsExternal()
	proxylessFresh := false
	if t.proxylessOut != nil && reflect.DeepEqual(t.proxylessIn, m.Proxyless) && reflect.DeepEqual(t.meshGRPCIn, m.MeshGRPCServers) {
		out.Proxyless = t.proxylessOut
	} else {
		r, err := translateProxyless(m.Proxyless)
		if err == nil {
			err = addMeshGRPCServers(r, m, rbacs)
		}
		if err == nil {
			err = groupConsistent(out.Shared, sharedClusters, r, ref, nil)
		}
		if err != nil {
			out.ProxylessFailed = fmt.Errorf("proxyless: %w", err)
		} else {
			out.Proxyless, proxylessFresh = r, true
		}
	}
	for i := range m.Groups {
		g := &m.Groups[i]
		if g.Proxyless {
			if out.ProxylessGroups == nil {
				out.ProxylessGroups = map[string]bool{}
			}
			out.ProxylessGroups[g.Name] = true
			switch {
			case out.ProxylessFailed != nil:
				out.Failed[g.Name] = out.ProxylessFailed
			case g.ProxylessTargets != nil:
				out.Groups[g.Name] = narrowProxyless(out.Proxyless, g.ProxylessTargets)
			default:
				out.Groups[g.Name] = out.Proxyless
			}
			continue
		}
		// A failed group's new objects are not remembered: the next
		// translation builds and validates them again.
		r, fresh := &Resources{}, &Resources{}
		groupListeners, groupSecrets := map[string]memoListener{}, map[string]memoSecret{}
		var errs []error
		groupLs, roles := sidecarAware(g)
		for j := range groupLs {
			l, role := &groupLs[j], &roles[j]
			if err := unsupported(l); err != nil {
				errs = append(errs, err)
			}
			key := g.Name + "/" + l.Name
			ml, ok := t.listeners[key]
			sameIn := ok && reflect.DeepEqual(&ml.in, l)
			if !sameIn || !reflect.DeepEqual(&ml.role, role) {
				lis, err := buildGroupListener(l, role, rbacs)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				fresh.Listeners = append(fresh.Listeners, lis)
				// A sidecar's intentions are in its listener, not its
				// routes: a changed intention keeps the route object.
				route := ml.route
				if !sameIn {
					route = nil
					if l.Protocol != "tcp" {
						route = buildRouteConfig(l, false)
						fresh.Routes = append(fresh.Routes, route)
					}
				}
				ml = memoListener{in: *l, role: *role, listener: lis, route: route}
			}
			groupListeners[key] = ml
			r.addRouteSources(l)
			r.Listeners = append(r.Listeners, ml.listener)
			if ml.route != nil {
				r.Routes = append(r.Routes, ml.route)
			}
		}
		if err := addTransparentOutbound(g, r, fresh); err != nil { // tproxy.go
			errs = append(errs, err)
		}
		if err := addGatewayListener(g, r, fresh, rbacs); err != nil { // gateway.go
			errs = append(errs, err)
		}
		for j := range g.Secrets {
			r.Secrets = append(r.Secrets, t.secret(g.Name, &g.Secrets[j], groupSecrets, fresh))
		}
		errs = append(errs, validateAll(fresh))
		errs = append(errs, groupConsistent(out.Shared, sharedClusters, r, ref, out.ExternalSecrets()))
		if !out.MeshSecretsExternal {
			errs = append(errs, meshSecretsServed(g, r, clusters, ref))
		}
		if err := errors.Join(errs...); err != nil {
			out.Failed[g.Name] = fmt.Errorf("proxy group %q: %w", g.Name, err)
			continue
		}
		maps.Copy(listeners, groupListeners)
		maps.Copy(secrets, groupSecrets)
		out.Groups[g.Name] = r
	}
	t.translateReach(m, out, clusters)
	t.clusters, t.listeners, t.secrets, t.refs = clusters, listeners, secrets, refs
	t.sharedChecked, t.sharedSecrets = true, len(m.Secrets)
	t.last = &lastTranslation{model: m, out: out}
	if proxylessFresh {
		t.proxylessIn, t.proxylessOut, t.meshGRPCIn = m.Proxyless, out.Proxyless, m.MeshGRPCServers
	} else if out.ProxylessFailed != nil {
		t.proxylessIn, t.proxylessOut, t.meshGRPCIn = nil, nil, nil
	}
	return out, nil
}

// ErrUnsupported marks model details Envoy has no way to express. The
// translator reports them rather than dropping them, which would serve a
// route that matches other requests than the policy says.
var ErrUnsupported = errors.New("not expressible in Envoy")

func unsupported(l *ir.Listener) error {
	var errs []error
	for _, vh := range l.VirtualHosts {
		for _, r := range vh.Routes {
			for _, q := range r.Match.Query {
				if q.Invert {
					// QueryParameterMatcher has no invert_match.
					errs = append(errs, fmt.Errorf("listener %q route %s: inverted match on query parameter %q: %w", l.Name, r.Source, q.Name, ErrUnsupported))
				}
			}
		}
	}
	return errors.Join(errs...)
}

type validator interface{ ValidateAll() error }

func validateAll(r *Resources) error {
	var errs []error
	for typ, items := range r.ByType() {
		for _, res := range items {
			if err := res.(validator).ValidateAll(); err != nil {
				errs = append(errs, fmt.Errorf("%s %q fails Envoy validation: %w", typ, ResourceName(res), err))
			}
		}
	}
	return errors.Join(errs...)
}
