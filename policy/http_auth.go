package policy

import (
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Resolving the listener filters that decide whether a request may pass
// at all: external authorization, JWT authentication and the global rate
// limit. Each calls a service (the authorization service, a JWKS
// endpoint, the rate-limit service) that is a Consul service, recorded
// with grpcCluster so that it becomes a watched cluster.

var failureModes = []string{"deny", "allow"}

// extAuthz resolves a listener's ext_authz block.
func (r *resolver) extAuthz(b *extAuthzBlock) *ir.ExtAuthz {
	if b == nil {
		return nil
	}
	a := &ir.ExtAuthz{Service: b.Service}
	r.grpcCluster(b.Service, "ext_authz service", valueRange(b.Body, "service", b.DefRange))
	if b.Timeout != nil && !isNull(b.Timeout) {
		if ds := durationAttr(b.Timeout, &a.Timeout); ds.HasErrors() {
			r.extend(ds)
		} else if a.Timeout <= 0 || a.Timeout%time.Millisecond != 0 {
			r.add(b.Timeout.Range(), "Invalid timeout", "ext_authz timeout %s: a positive whole number of milliseconds, e.g. \"250ms\"; every request waits for the check.", a.Timeout)
		}
	}
	if b.FailureMode != nil {
		if !oneOf(*b.FailureMode, failureModes) {
			r.add(valueRange(b.Body, "failure_mode", b.DefRange), "Invalid failure_mode", "%q is not one of %s: what Envoy does with a request when the service cannot answer.", *b.FailureMode, quoteList(failureModes))
		}
		a.FailureModeAllow = *b.FailureMode == "allow"
	}
	for i, h := range b.Headers {
		if !headerName.MatchString(h) {
			r.add(elemRange(b.Body, "headers", i, b.DefRange), "Invalid header name", "headers: %q is not a valid HTTP header name.", h)
		}
		a.Headers = append(a.Headers, strings.ToLower(h))
	}
	return a
}

// jwksURL is what Envoy fetches a key set from: an http(s) URL.
var jwksURL = regexp.MustCompile(`^https?://[^/\s]+(/\S*)?$`)

// jwtProviders resolves a listener's jwt_provider blocks, recording the
// services their key sets come from and the files the bridge reads.
func (r *resolver) jwtProviders(b *listenerBlock, l *Listener) {
	seen := map[string]hcl.Range{}
	for _, pb := range b.JWTProviders {
		if prev, ok := seen[pb.Name]; ok {
			r.add(pb.DefRange, "Duplicate jwt_provider", "jwt_provider %q is already defined at %s.", pb.Name, pos(prev))
			continue
		}
		seen[pb.Name] = pb.DefRange
		if !subsetName.MatchString(pb.Name) {
			r.add(pb.DefRange, "Invalid jwt_provider name", "%q: use letters, digits, '-' and '_' (routes name it in jwt { provider = ... }).", pb.Name)
		}
		p := ir.JWTProvider{Name: pb.Name, Issuer: pb.Issuer, Audiences: pb.Audiences, ClaimHeaders: pb.ClaimHeaders}
		if pb.Issuer == "" {
			r.add(valueRange(pb.Body, "issuer", pb.DefRange), "Empty issuer", "jwt_provider %q: issuer must be the tokens' iss claim, e.g. \"https://auth.example.com\".", pb.Name)
		}
		switch {
		case (pb.JWKSService == nil) == (pb.JWKSFile == nil):
			r.add(pb.DefRange, "Invalid jwt_provider key set", "jwt_provider %q takes its keys from jwks_service = \"SERVICE\" (fetched by Envoy, with jwks_url) or jwks_file = \"PATH\" (read by the bridge), exactly one of them.", pb.Name)
		case pb.JWKSService != nil:
			p.JWKSCluster = *pb.JWKSService
			p.JWKSURI = "http://" + p.JWKSCluster + "/.well-known/jwks.json"
			r.httpCluster(p.JWKSCluster, "jwt_provider jwks_service", valueRange(pb.Body, "jwks_service", pb.DefRange))
		case *pb.JWKSFile == "":
			r.add(valueRange(pb.Body, "jwks_file", pb.DefRange), "Empty file name", "jwks_file must name a JSON Web Key Set file on the bridge's host.")
		default:
			f := r.pemFile(pb.Body, "jwks_file", *pb.JWKSFile, PEMCA, pb.DefRange)
			l.JWKSFiles = append(l.JWKSFiles, &JWKSFile{Provider: len(l.HTTP.JWTProviders), Path: f.Path, Range: f.Range})
		}
		if pb.JWKSURL != nil {
			rng := valueRange(pb.Body, "jwks_url", pb.DefRange)
			switch {
			case pb.JWKSService == nil:
				r.add(rng, "jwks_url without jwks_service", "Envoy fetches a key set through a cluster, and the bridge's clusters are Consul services: register the identity provider as a Consul service (an external service) and name it in jwks_service.")
			case !jwksURL.MatchString(*pb.JWKSURL):
				r.add(rng, "Invalid jwks_url", "%q is not an http or https URL.", *pb.JWKSURL)
			}
			p.JWKSURI = *pb.JWKSURL
		}
		if pb.CacheDuration != nil && !isNull(pb.CacheDuration) {
			if pb.JWKSService == nil {
				r.add(pb.CacheDuration.Range(), "cache_duration without jwks_service", "a local key set is sent with the listener; only a fetched one is cached.")
			} else if ds := durationAttr(pb.CacheDuration, &p.CacheDuration); ds.HasErrors() {
				r.extend(ds)
			}
		}
		set(&p.ForwardPayloadHeader, pb.ForwardPayloadHeader)
		if p.ForwardPayloadHeader != "" && !headerName.MatchString(p.ForwardPayloadHeader) {
			r.add(valueRange(pb.Body, "forward_payload_header", pb.DefRange), "Invalid header name", "forward_payload_header %q is not a valid HTTP header name.", p.ForwardPayloadHeader)
		}
		set(&p.Forward, pb.Forward)
		for _, c := range keys(pb.ClaimHeaders) {
			if h := pb.ClaimHeaders[c]; !headerName.MatchString(h) || strings.HasPrefix(h, ":") {
				r.add(keyRange(pb.Body, "claim_headers", c, pb.DefRange), "Invalid header name", "claim_headers: claim %q goes to %q, which is not a valid HTTP header name.", c, h)
			}
		}
		l.HTTP.JWTProviders = append(l.HTTP.JWTProviders, p)
	}
}

// jwtRule resolves a route's or virtual host's jwt block; its provider is
// checked against the listener's (checkJWTRules).
func (r *resolver) jwtRule(b *jwtBlock) *ir.JWTRule {
	if b == nil {
		return nil
	}
	j := &ir.JWTRule{}
	set(&j.Provider, b.Provider)
	set(&j.AllowMissing, b.AllowMissing)
	set(&j.Bypass, b.Bypass)
	switch {
	case (b.Provider != nil) == j.Bypass:
		r.add(b.DefRange, "Invalid jwt", "a jwt block requires a token with provider = \"NAME\" (a jwt_provider of the listener) or skips authentication with bypass = true, exactly one of them.")
	case b.AllowMissing != nil && j.Bypass:
		r.add(valueRange(b.Body, "allow_missing", b.DefRange), "Invalid jwt", "allow_missing applies to a required provider, not to bypass = true.")
	}
	return j
}

// checkJWTRules checks that the jwt blocks of a listener's virtual hosts
// and routes name its providers.
func (r *resolver) checkJWTRules(b *listenerBlock, l *Listener, where string) {
	check := func(jb *jwtBlock) {
		if jb == nil || jb.Provider == nil {
			return
		}
		if !slices.ContainsFunc(l.HTTP.JWTProviders, func(p ir.JWTProvider) bool { return p.Name == *jb.Provider }) {
			r.add(valueRange(jb.Body, "provider", jb.DefRange), "Unknown JWT provider", "%s has no jwt_provider %q.", where, *jb.Provider)
		}
	}
	for _, vb := range b.VirtualHosts {
		check(vb.JWT)
		for _, rb := range vb.Routes {
			check(rb.JWT)
		}
	}
}

// rateLimitService resolves a listener's rate_limit_service block.
func (r *resolver) rateLimitService(b *rateLimitServiceBlock) *ir.RateLimitService {
	if b == nil {
		return nil
	}
	s := &ir.RateLimitService{Service: b.Service, Domain: b.Domain}
	r.grpcCluster(b.Service, "rate_limit_service", valueRange(b.Body, "service", b.DefRange))
	if b.Domain == "" {
		r.add(valueRange(b.Body, "domain", b.DefRange), "Empty domain", "domain names the rate-limit service's configuration for these requests (its config's domain:), e.g. \"edge\".")
	}
	if b.FailureMode != nil {
		if !oneOf(*b.FailureMode, failureModes) {
			r.add(valueRange(b.Body, "failure_mode", b.DefRange), "Invalid failure_mode", "%q is not one of %s: what Envoy does with a request when the service cannot answer.", *b.FailureMode, quoteList(failureModes))
		}
		s.FailureModeDeny = *b.FailureMode == "deny"
	}
	if b.Timeout != nil && !isNull(b.Timeout) {
		if ds := durationAttr(b.Timeout, &s.Timeout); ds.HasErrors() {
			r.extend(ds)
		} else if s.Timeout%time.Millisecond != 0 {
			r.add(b.Timeout.Range(), "Invalid timeout", "rate_limit_service timeout %s: a whole number of milliseconds, e.g. \"20ms\"; every request waits for the answer.", s.Timeout)
		}
	}
	return s
}

// globalRateLimits resolves a global_rate_limit block's descriptors.
func (r *resolver) globalRateLimits(b *globalRateLimitBlock) []ir.GlobalDescriptor {
	if b == nil {
		return nil
	}
	if len(b.Descriptors) == 0 {
		r.add(b.DefRange, "global_rate_limit without descriptors", "add a descriptor block with entry blocks: the rate-limit service counts requests by descriptor.")
	}
	var out []ir.GlobalDescriptor
	for _, db := range b.Descriptors {
		if len(db.Entries) == 0 {
			r.add(db.DefRange, "Descriptor without entries", "a descriptor lists its entries in order: entry { generic_key = \"...\" }, entry { header = \"...\" }, entry { client_address = true }.")
		}
		var d ir.GlobalDescriptor
		for _, eb := range db.Entries {
			e := ir.GlobalEntry{}
			set(&e.Header, eb.Header)
			set(&e.ClientAddress, eb.ClientAddress)
			set(&e.GenericKey, eb.GenericKey)
			set(&e.Key, eb.Key)
			e.Header = strings.ToLower(e.Header)
			kinds := 0
			for _, set := range []bool{eb.Header != nil, e.ClientAddress, eb.GenericKey != nil} {
				if set {
					kinds++
				}
			}
			switch {
			case kinds != 1:
				r.add(eb.DefRange, "Invalid entry", "an entry is header = \"NAME\", client_address = true or generic_key = \"VALUE\", exactly one of them.")
			case eb.Header != nil && (!headerName.MatchString(e.Header) || strings.HasPrefix(e.Header, ":")):
				r.add(valueRange(eb.Body, "header", eb.DefRange), "Invalid header name", "%q is not a valid HTTP header name.", *eb.Header)
			case eb.GenericKey != nil && e.GenericKey == "":
				r.add(valueRange(eb.Body, "generic_key", eb.DefRange), "Empty generic_key", "generic_key is the entry's value; it cannot be empty.")
			case eb.Key != nil && e.ClientAddress:
				r.add(valueRange(eb.Body, "key", eb.DefRange), "Invalid entry", "the client address entry's key is always \"remote_address\" (Envoy's).")
			case eb.Key != nil && e.Key == "":
				r.add(valueRange(eb.Body, "key", eb.DefRange), "Empty key", "key names the entry in the rate-limit service's configuration; omit it for the default.")
			}
			switch {
			case e.ClientAddress:
				e.Key = "remote_address"
			case e.Key == "" && e.Header != "":
				e.Key = e.Header
			case e.Key == "":
				e.Key = "generic_key"
			}
			d.Entries = append(d.Entries, e)
		}
		out = append(out, d)
	}
	return out
}

// checkGlobalRateLimits requires a rate_limit_service of the listener
// whose virtual hosts or routes choose descriptors.
func (r *resolver) checkGlobalRateLimits(b *listenerBlock, l *Listener, where string) {
	if l.HTTP.RateLimitService != nil {
		return
	}
	for _, vb := range b.VirtualHosts {
		blocks := []*globalRateLimitBlock{vb.GlobalRL}
		for _, rb := range vb.Routes {
			blocks = append(blocks, rb.GlobalRL)
		}
		for _, gb := range blocks {
			if gb != nil {
				r.add(gb.DefRange, "global_rate_limit without a rate_limit_service", "%s has no rate_limit_service block, so no service would count these descriptors; add one to the listener.", where)
			}
		}
	}
}
