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
