package policy

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

var (
	lbPolicies = []string{"round_robin", "least_request", "ring_hash", "random"}
	protocols  = []string{"http", "tcp"}
	// retryOn lists Envoy's router retry_on conditions, HTTP and gRPC.
	retryOn = []string{
		"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "envoy-ratelimited",
		"retriable-4xx", "refused-stream", "retriable-status-codes", "retriable-headers",
		"http3-post-connect-failure", "cancelled", "deadline-exceeded", "internal",
		"resource-exhausted", "unavailable",
	}
	redirectStatuses = []int{301, 302, 303, 307, 308}
	subsetName       = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	methodName       = regexp.MustCompile(`^[A-Z]+$`)
	headerName       = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+.^_` + "`" + `|~-]+$`)
)

// resolver turns the raw blocks of all documents into a Policy.
type resolver struct {
	diags
	pol      *Policy
	services map[string]*serviceBlock
	// targets that name a subset, with where the subset is written; they
	// are checked once every service is known.
	targets []targetRef
	// noChain are the routes that say chain = false.
	noChain map[*Route]bool
	// grpcTargets are the services grpc_service routes send calls to.
	grpcTargets []grpcTargetRef
	// grpcClusters are the services HTTP filters call over gRPC (access
	// log collectors), checked once every service is known.
	grpcClusters []grpcClusterRef
	// kv names the documents read from Consul KV, where file paths must
	// be absolute.
	kv map[string]bool
}

type targetRef struct {
	Target
	rng hcl.Range
}

func resolvePolicy(docs []*Document) (*Policy, hcl.Diagnostics) {
	r := &resolver{pol: &Policy{}, services: map[string]*serviceBlock{}, kv: map[string]bool{}}
	for _, d := range docs {
		if d.FromKV {
			r.kv[d.Name] = true
		}
	}
	var exportAll *bool
	var exportAt hcl.Range
	var unmatched *string
	var unmatchedAt hcl.Range
	seenProxy := map[string]hcl.Range{}
	seenGRPC := map[string]hcl.Range{}
	for _, d := range docs {
		if d.exportAll != nil {
			if exportAll != nil && *exportAll != *d.exportAll {
				r.add(d.exportAllRange, "Conflicting export_all_services",
					"export_all_services is %v here but %v at %s; set it in one place.", *d.exportAll, *exportAll, pos(exportAt))
			}
			exportAll, exportAt = d.exportAll, d.exportAllRange
		}
		if d.unmatched != nil {
			if !oneOf(*d.unmatched, []string{UnmatchedNone, UnmatchedAll}) {
				r.add(d.unmatchedRange, "Invalid unmatched_nodes",
					"unmatched_nodes is %q; it is \"none\" (nodes in no proxy group get nothing) or \"all\" (every cluster and its endpoints, no secrets).", *d.unmatched)
			} else if unmatched != nil && *unmatched != *d.unmatched {
				r.add(d.unmatchedRange, "Conflicting unmatched_nodes",
					"unmatched_nodes is %q here but %q at %s; set it in one place.", *d.unmatched, *unmatched, pos(unmatchedAt))
			} else {
				unmatched, unmatchedAt = d.unmatched, d.unmatchedRange
			}
		}
		for _, s := range d.services {
			if prev, ok := r.services[s.Name]; ok {
				r.add(s.DefRange, "Duplicate service block",
					"service %q is already defined at %s; each service may be configured once across all files and KV documents.", s.Name, pos(prev.DefRange))
				continue
			}
			r.services[s.Name] = s
		}
		for _, p := range d.proxies {
			if prev, ok := seenProxy[p.Name]; ok {
				r.add(p.DefRange, "Duplicate proxy block",
					"proxy %q is already defined at %s; each proxy group may be defined once.", p.Name, pos(prev))
				continue
			}
			seenProxy[p.Name] = p.DefRange
			r.pol.Proxies = append(r.pol.Proxies, r.proxy(p))
		}
		for _, g := range d.grpcServices {
			if prev, ok := seenGRPC[g.Name]; ok {
				r.add(g.DefRange, "Duplicate grpc_service block",
					"grpc_service %q is already defined at %s; each xDS target name may be routed once across all files and KV documents.", g.Name, pos(prev))
				continue
			}
			seenGRPC[g.Name] = g.DefRange
			r.pol.GRPCServices = append(r.pol.GRPCServices, r.grpcService(g))
		}
	}
	slices.SortFunc(r.pol.GRPCServices, func(a, b *GRPCService) int { return strings.Compare(a.Name, b.Name) })
	r.mesh(docs)
	r.meshRoutes(docs)
	r.chains(docs)
	names := make([]string, 0, len(r.services))
	for n := range r.services {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		r.pol.Services = append(r.pol.Services, r.service(r.services[n]))
	}
	r.applyChains(r.noChain)
	// Services the listeners' filters call (collectors) become clusters.
	r.filterServices()
	// Targets are checked after every service is known, whatever the order
	// of documents.
	r.checkTargets()
	r.checkGRPCTargets()
	r.checkDefaultAPIListeners()
	switch {
	case exportAll != nil:
		r.pol.ExportAllServices = *exportAll
	default:
		// A proxyless group names no service, so it keeps a catalog
		// mirror a mirror.
		routing := slices.ContainsFunc(r.pol.Proxies, func(p *Proxy) bool { return !p.Proxyless })
		r.pol.ExportAllServices = len(r.pol.Services) == 0 && !routing && len(r.pol.GRPCServices) == 0
	}
	switch {
	case unmatched != nil:
		r.pol.UnmatchedNodes = *unmatched
	case len(r.pol.Proxies) > 0:
		// Once groups are declared, a node that matches none is most
		// likely misconfigured (or not ours): it gets nothing rather
		// than every backend.
		r.pol.UnmatchedNodes = UnmatchedNone
	default:
		r.pol.UnmatchedNodes = UnmatchedAll
	}
	return r.pol, r.list
}

func oneOf[T comparable](v T, allowed []T) bool { return slices.Contains(allowed, v) }

func quoteList(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

func (r *resolver) service(b *serviceBlock) *Service {
	s := &Service{
		Name:           b.Name,
		ConsulName:     b.Name,
		ConnectTimeout: DefaultConnectTimeout,
		LBPolicy:       ir.LBRoundRobin,
		Source:         pos(b.DefRange),
	}
	set(&s.ConsulName, b.ConsulName)
	set(&s.Datacenter, b.Datacenter)
	set(&s.OnlyPassing, b.OnlyPassing)
	set(&s.HTTP2, b.HTTP2)
	if strings.Contains(b.Name, ".") {
		r.add(b.DefRange, "Invalid service name", "service %q: a cluster name may not contain \".\", which separates subsets (\"api.v2\"). Use consul_service to refer to a Consul service whose name has dots.", b.Name)
	} else if !ir.QueryableServiceName(b.Name) {
		r.add(b.DefRange, "Invalid service name", unqueryable, b.Name)
	}
	if b.ConsulName != nil && !ir.QueryableServiceName(*b.ConsulName) {
		r.add(valueRange(b.Body, "consul_service", b.DefRange), "Invalid service name", unqueryable, *b.ConsulName)
	}
	r.extend(durationAttr(b.ConnectTimeout, &s.ConnectTimeout))
	if b.LBPolicy != nil {
		if !oneOf(*b.LBPolicy, lbPolicies) {
			r.add(valueRange(b.Body, "lb_policy", b.DefRange), "Invalid lb_policy", "%q is not one of %s.", *b.LBPolicy, quoteList(lbPolicies))
		}
		s.LBPolicy = ir.LBPolicy(*b.LBPolicy)
	}
	for _, h := range b.HashPolicies {
		hp := ir.HashPolicy{}
		n := 0
		if h.Header != nil {
			hp.Header, n = *h.Header, n+1
		}
		if h.Cookie != nil {
			hp.Cookie, n = *h.Cookie, n+1
		}
		if h.SourceIP != nil && *h.SourceIP {
			hp.SourceIP, n = true, n+1
		}
		set(&hp.Terminal, h.Terminal)
		if n != 1 {
			r.add(h.DefRange, "Invalid hash_policy", "A hash_policy needs exactly one of header, cookie or source_ip = true; this one has %d.", n)
		}
		if s.LBPolicy != ir.LBRingHash {
			r.add(h.DefRange, "hash_policy without ring_hash", "hash_policy only affects lb_policy = \"ring_hash\"; service %q uses %q. Set lb_policy = \"ring_hash\" or remove the hash_policy.", b.Name, s.LBPolicy)
		}
		s.HashPolicies = append(s.HashPolicies, hp)
	}
	seen := map[string]hcl.Range{}
	for _, sb := range b.Subsets {
		if prev, ok := seen[sb.Name]; ok {
			r.add(sb.DefRange, "Duplicate subset", "subset %q of service %q is already defined at %s; rename or remove one of them.", sb.Name, b.Name, pos(prev))
			continue
		}
		seen[sb.Name] = sb.DefRange
		if !subsetName.MatchString(sb.Name) {
			r.add(sb.DefRange, "Invalid subset name", "subset %q: use letters, digits, '-' and '_' only; it becomes cluster \"%s.%s\".", sb.Name, b.Name, sb.Name)
		}
		if len(sb.Tags) == 0 && len(sb.Meta) == 0 {
			r.add(sb.DefRange, "Empty subset", "subset %q selects every instance; give it tags or meta to select by.", sb.Name)
		}
		s.Subsets = append(s.Subsets, Subset{Name: sb.Name, Tags: slices.Sorted(slices.Values(sb.Tags)), Meta: sb.Meta})
		if sb.Failover != nil {
			r.failover(sb.Failover, s, sb.Name)
		}
	}
	slices.SortFunc(s.Subsets, func(a, b Subset) int { return strings.Compare(a.Name, b.Name) })
	if cb := b.CircuitBreaker; cb != nil {
		s.CircuitBreaker = &ir.CircuitBreaker{
			MaxConnections:     r.nonNegative(cb.Body, "max_connections", cb.MaxConnections, cb.DefRange),
			MaxPendingRequests: r.nonNegative(cb.Body, "max_pending_requests", cb.MaxPendingRequests, cb.DefRange),
			MaxRequests:        r.nonNegative(cb.Body, "max_requests", cb.MaxRequests, cb.DefRange),
			MaxRetries:         r.nonNegative(cb.Body, "max_retries", cb.MaxRetries, cb.DefRange),
		}
		r.retryBudget(cb, s.CircuitBreaker)
	}
	if od := b.OutlierDetection; od != nil {
		o := &ir.OutlierDetection{
			Consecutive5xx:     5,
			Interval:           10 * time.Second,
			BaseEjectionTime:   30 * time.Second,
			MaxEjectionPercent: 10,
		}
		if od.Consecutive5xx != nil {
			o.Consecutive5xx = r.nonNegative(od.Body, "consecutive_5xx", od.Consecutive5xx, od.DefRange)
		}
		if od.MaxEjectionPercent != nil {
			o.MaxEjectionPercent = r.percentInt(od.Body, "max_ejection_percent", *od.MaxEjectionPercent, od.DefRange)
		}
		r.extend(durationAttr(od.Interval, &o.Interval))
		r.extend(durationAttr(od.BaseEjectionTime, &o.BaseEjectionTime))
		s.OutlierDetection = o
	}
	if za := b.ZoneAware; za != nil {
		// Envoy's defaults: 6 endpoints, every request.
		z := &ir.ZoneAware{MinClusterSize: 6, RoutingPercent: 100}
		if za.MinClusterSize != nil {
			z.MinClusterSize = uint64(r.nonNegative(za.Body, "min_cluster_size", za.MinClusterSize, za.DefRange))
		}
		if za.RoutingPercent != nil {
			z.RoutingPercent = r.percent(za.Body, "routing_percent", za.RoutingPercent, za.DefRange)
		}
		s.ZoneAware = z
	}
	if hc := b.HealthCheck; hc != nil {
		h := &ir.HealthCheck{Path: "/", Interval: 10 * time.Second, Timeout: 2 * time.Second, HealthyThreshold: 2, UnhealthyThreshold: 3}
		set(&h.Path, hc.Path)
		set(&h.Host, hc.Host)
		if !strings.HasPrefix(h.Path, "/") {
			r.add(valueRange(hc.Body, "path", hc.DefRange), "Invalid health check path", "path %q must start with \"/\".", h.Path)
		}
		r.extend(durationAttr(hc.Interval, &h.Interval))
		r.extend(durationAttr(hc.Timeout, &h.Timeout))
		if hc.HealthyThreshold != nil {
			h.HealthyThreshold = r.positive(hc.Body, "healthy_threshold", *hc.HealthyThreshold, hc.DefRange)
		}
		if hc.UnhealthyThreshold != nil {
			h.UnhealthyThreshold = r.positive(hc.Body, "unhealthy_threshold", *hc.UnhealthyThreshold, hc.DefRange)
		}
		s.HealthCheck = h
	}
	if t := b.TLS; t != nil {
		u := &UpstreamTLS{}
		set(&u.SNI, t.SNI)
		if t.CAFile != nil {
			u.CA = r.pemFile(t.Body, "ca_file", *t.CAFile, PEMCA, t.DefRange)
		}
		if t.CertFile != nil {
			u.Cert = r.pemFile(t.Body, "cert_file", *t.CertFile, PEMCertificate, t.DefRange)
		}
		if t.KeyFile != nil {
			u.Key = r.pemFile(t.Body, "key_file", *t.KeyFile, PEMPrivateKey, t.DefRange)
		}
		if (u.Cert == nil) != (u.Key == nil) {
			r.add(t.DefRange, "Incomplete client certificate", "tls needs both cert_file and key_file for a client certificate, or neither.")
		}
		s.TLS = u
	}
	if f := b.Failover; f != nil {
		r.failover(f, s, "")
	}
	return s
}

func (r *resolver) nonNegative(body hcl.Body, name string, v *int, def hcl.Range) uint32 {
	if v == nil {
		return 0
	}
	if *v < 0 || int64(*v) > 1<<31 {
		r.add(valueRange(body, name, def), "Invalid "+name, "%s = %d must be between 0 and 2147483648.", name, *v)
		return 0
	}
	return uint32(*v)
}

func (r *resolver) positive(body hcl.Body, name string, v int, def hcl.Range) uint32 {
	if v < 1 || int64(v) > 1<<31 {
		r.add(valueRange(body, name, def), "Invalid "+name, "%s = %d must be a positive integer.", name, v)
		return 1
	}
	return uint32(v)
}

func (r *resolver) percentInt(body hcl.Body, name string, v int, def hcl.Range) uint32 {
	if v < 0 || v > 100 {
		r.add(valueRange(body, name, def), "Invalid "+name, "%s = %d is not a percentage between 0 and 100.", name, v)
		return 0
	}
	return uint32(v)
}

func (r *resolver) percent(body hcl.Body, name string, v *float64, def hcl.Range) float64 {
	if v == nil {
		return 100
	}
	if *v < 0 || *v > 100 {
		r.add(valueRange(body, name, def), "Invalid "+name, "%s = %v is not a percentage between 0 and 100.", name, *v)
		return 100
	}
	return *v
}

// action resolves `service`/`subset` or `split` blocks into targets,
// requiring exactly one of the two forms unless other actions count. route
// is false for a tcp listener, which has no redirect or direct_response.
func (r *resolver) action(body hcl.Body, def hcl.Range, where string, route bool, service, subset *string, splits []*splitBlock, otherActions int) []Target {
	forms := otherActions
	if service != nil {
		forms++
	}
	if len(splits) > 0 {
		forms++
	}
	if forms != 1 {
		if route {
			r.add(def, "Route needs exactly one action", "%s has %d actions; use exactly one of service = \"...\", split blocks, redirect or direct_response.", where, forms)
		} else {
			r.add(def, "Listener needs exactly one target", "%s is protocol \"tcp\" and has %d targets; use exactly one of service = \"...\" or split blocks.", where, forms)
		}
	}
	if subset != nil && service == nil {
		r.add(valueRange(body, "subset", def), "subset without service", "%s: subset %q names no service; add service = \"...\".", where, *subset)
	}
	var out []Target
	if service != nil {
		t := Target{Service: *service, Weight: 1}
		set(&t.Subset, subset)
		if t.Service == "" {
			r.add(valueRange(body, "service", def), "Empty service", "%s: service must name a Consul service.", where)
		}
		r.target(t, valueRange(body, "service", def), valueRange(body, "subset", def))
		out = append(out, t)
	}
	var total int64
	for _, sp := range splits {
		if sp.Weight < 1 || int64(sp.Weight) > math.MaxUint32 {
			r.add(valueRange(sp.Body, "weight", sp.DefRange), "Invalid split weight", "weight %d must be a positive integer below 2^32; remove the split to send it nothing.", sp.Weight)
			continue
		}
		if sp.Service == "" {
			r.add(valueRange(sp.Body, "service", sp.DefRange), "Empty service", "%s: split service must name a Consul service.", where)
		}
		total += int64(sp.Weight)
		t := Target{Service: sp.Service, Weight: sp.Weight}
		set(&t.Subset, sp.Subset)
		r.target(t, valueRange(sp.Body, "service", sp.DefRange), valueRange(sp.Body, "subset", sp.DefRange))
		out = append(out, t)
	}
	switch {
	case len(splits) > 0 && total == 0:
		r.add(def, "Split weights sum to zero", "%s: the split weights must add up to more than 0.", where)
	case total > math.MaxUint32:
		r.add(def, "Split weights too large", "%s: the split weights add up to %d; Envoy needs the sum below 2^32, so scale them down (e.g. to percentages).", where, total)
	}
	return out
}

func isNull(e hcl.Expression) bool {
	v, diags := e.Value(nil)
	return !diags.HasErrors() && v.IsNull()
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// unqueryable explains why a name is refused (ir.QueryableServiceName).
const unqueryable = "service %q: Consul's HTTP API cannot query this name, nor can it be a cluster name; use letters, digits, '-', '_' and '.' (and rename the Consul service if it has such a name)."

// target records a target for checkTargets; serviceRng is where its
// service is written, rng its subset.
func (r *resolver) target(t Target, serviceRng, rng hcl.Range) {
	if t.Service != "" && !ir.QueryableServiceName(t.Service) {
		r.add(serviceRng, "Invalid service name", unqueryable, t.Service)
	}
	if t.Subset != "" || strings.Contains(t.Service, ".") {
		r.targets = append(r.targets, targetRef{t, rng})
	}
}

// checkTargets verifies that every subset a route, split, mirror or tcp
// listener names is declared.
func (r *resolver) checkTargets() {
	for _, ref := range r.targets {
		if owner, sub := r.subsetNamed(ref.Service); owner != nil && ref.Subset == "" {
			// Cluster S.X is subset X of service S: a service of that name
			// would share its cluster, and its endpoints with it.
			r.add(ref.rng, "Ambiguous service name", "service %q has the cluster name of subset %q of service %q; route to that subset with service = %q and subset = %q, or rename the Consul service.", ref.Service, sub, owner.Name, owner.Name, sub)
			continue
		}
		if ref.Subset == "" {
			continue
		}
		s := r.pol.Service(ref.Service)
		if s != nil && s.SubsetNamed(ref.Subset) != nil {
			continue
		}
		known := "no subsets are declared for it"
		if s != nil && len(s.Subsets) > 0 {
			var names []string
			for _, ss := range s.Subsets {
				names = append(names, ss.Name)
			}
			known = "declared subsets: " + quoteList(names)
		}
		r.add(ref.rng, "Unknown subset", "subset %q of service %q is not declared (%s); declare it in service %q { subset %q { tags = [...] } } or fix the name.", ref.Subset, ref.Service, known, ref.Service, ref.Subset)
	}
}

// subsetNamed finds the service whose subset cluster is named name (S.X),
// and the subset.
func (r *resolver) subsetNamed(name string) (*Service, string) {
	for i := strings.Index(name, "."); i >= 0; {
		if s := r.pol.Service(name[:i]); s != nil && s.SubsetNamed(name[i+1:]) != nil {
			return s, name[i+1:]
		}
		j := strings.Index(name[i+1:], ".")
		if j < 0 {
			break
		}
		i += j + 1
	}
	return nil, ""
}
