package policy

import (
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

var (
	tlsVersions = []string{"1.0", "1.1", "1.2", "1.3"}
	// defaultHTTPALPN lets clients negotiate HTTP/2 with an http
	// listener, whose connection manager speaks both.
	defaultHTTPALPN = []string{"h2", "http/1.1"}
)

// pemFile records a file a tls block names. A relative path is resolved
// against the directory of the document that names it, so a policy and
// its certificates can move together; a KV document has no directory, so
// it must use absolute paths. No file is read here (see ReadFiles).
func (r *resolver) pemFile(body hcl.Body, attr, path string, kind PEMKind, def hcl.Range) *PEMFile {
	rng := valueRange(body, attr, def)
	f := &PEMFile{Path: path, Range: rng, Kind: kind}
	switch {
	case path == "":
		r.add(rng, "Empty file name", "%s must name a PEM file on the bridge's host.", attr)
	case filepath.IsAbs(path):
	case r.kv[rng.Filename]:
		r.add(rng, "Relative path in KV", "%s = %q: a policy document in Consul KV has no directory to resolve a relative path against; write an absolute path on the bridge's host.", attr, path)
	default:
		f.Path = filepath.Join(filepath.Dir(rng.Filename), path)
	}
	return f
}

// listenerTLS resolves a listener's tls block and the tls blocks of its
// virtual hosts, which pick a certificate by server name (SNI).
func (r *resolver) listenerTLS(group string, b *listenerBlock, l *Listener, where string) *ListenerTLS {
	tb := b.TLS
	if tb == nil {
		for _, vb := range b.VirtualHosts {
			if vb.TLS != nil {
				r.add(vb.TLS.DefRange, "tls on a virtual_host of a plaintext listener",
					"%s has no tls block, so virtual_host %q has no certificate to choose; add tls { certificate \"NAME\" { ... } } to the listener, or remove this block.", where, vb.Name)
			}
		}
		return nil
	}
	t := &ListenerTLS{Range: tb.DefRange}
	seen := map[string]hcl.Range{}
	for _, cb := range tb.Certificates {
		if prev, ok := seen[cb.Name]; ok {
			r.add(cb.DefRange, "Duplicate certificate", "certificate %q of %s is already defined at %s.", cb.Name, where, pos(prev))
			continue
		}
		seen[cb.Name] = cb.DefRange
		if !subsetName.MatchString(cb.Name) {
			r.add(cb.DefRange, "Invalid certificate name", "certificate %q: use letters, digits, '-' and '_' only; it names the SDS secret \"%s.%s/cert/%s\".", cb.Name, group, l.Name, cb.Name)
		}
		t.Certificates = append(t.Certificates, &Certificate{
			Name:  cb.Name,
			Cert:  r.pemFile(cb.Body, "cert_file", cb.CertFile, PEMCertificate, cb.DefRange),
			Key:   r.pemFile(cb.Body, "key_file", cb.KeyFile, PEMPrivateKey, cb.DefRange),
			Range: cb.DefRange,
		})
	}
	if len(t.Certificates) == 0 {
		r.add(tb.DefRange, "TLS without a certificate", "the tls block of %s needs at least one certificate \"NAME\" { cert_file = \"...\" key_file = \"...\" } block.", where)
		return t
	}
	t.Default = t.Certificates[0].Name
	if d := tb.DefaultCertificate; d != nil {
		if t.Certificate(*d) == nil {
			r.add(valueRange(tb.Body, "default_certificate", tb.DefRange), "Unknown certificate",
				"default_certificate = %q names no certificate of %s; declared: %s.", *d, where, quoteList(slices.Sorted(maps.Keys(seen))))
		} else {
			t.Default = *d
		}
	}
	for _, v := range []struct {
		attr string
		val  *string
		dst  *string
	}{{"min_version", tb.MinVersion, &t.MinVersion}, {"max_version", tb.MaxVersion, &t.MaxVersion}} {
		if v.val == nil {
			continue
		}
		if !oneOf(*v.val, tlsVersions) {
			r.add(valueRange(tb.Body, v.attr, tb.DefRange), "Invalid TLS version", "%s = %q is not one of %s.", v.attr, *v.val, quoteList(tlsVersions))
			continue
		}
		*v.dst = *v.val
	}
	if t.MinVersion != "" && t.MaxVersion != "" && t.MinVersion > t.MaxVersion {
		r.add(valueRange(tb.Body, "max_version", tb.DefRange), "Invalid TLS versions", "max_version %q is below min_version %q.", t.MaxVersion, t.MinVersion)
	}
	switch {
	case tb.ALPN != nil:
		t.ALPN = tb.ALPN
		seenProto := map[string]bool{}
		for i, p := range tb.ALPN {
			if p == "" || len(p) > 255 || seenProto[p] {
				r.add(elemRange(tb.Body, "alpn", i, tb.DefRange), "Invalid ALPN protocol", "alpn entry %q is empty, longer than 255 bytes or repeated; list protocol ids such as \"h2\" and \"http/1.1\" once each.", p)
			}
			seenProto[p] = true
		}
	case l.Protocol == "http":
		t.ALPN = defaultHTTPALPN
	}
	if tb.ClientCAFile != nil {
		t.ClientCA = r.pemFile(tb.Body, "client_ca_file", *tb.ClientCAFile, PEMCA, tb.DefRange)
	}
	r.sni(b, t, where)
	return t
}

// sni works out which server names select which certificate: every
// domain of a virtual host selects the certificate its tls block names,
// or the default. Envoy picks a filter chain by the client's SNI, exact
// names before wildcards, and the chain without server names for
// everything else; so when any virtual host picks another certificate
// than the default, the default's own domains are listed too, lest a
// wildcard of another certificate capture them.
func (r *resolver) sni(b *listenerBlock, t *ListenerTLS, where string) {
	type claim struct {
		cert, vhost string
		rng         hcl.Range
	}
	owner := map[string]claim{}
	byCert := map[string][]string{}
	used := map[string]bool{t.Default: true}
	others := false
	seenVH := map[string]bool{}
	for _, vb := range b.VirtualHosts {
		if seenVH[vb.Name] {
			continue // a duplicate, reported by listener
		}
		seenVH[vb.Name] = true
		cert := t.Default
		if vb.TLS != nil {
			name := vb.TLS.Certificate
			if t.Certificate(name) == nil {
				var names []string
				for _, c := range t.Certificates {
					names = append(names, c.Name)
				}
				r.add(valueRange(vb.TLS.Body, "certificate", vb.TLS.DefRange), "Unknown certificate",
					"virtual_host %q selects certificate %q, which %s does not declare; declared: %s.", vb.Name, name, where, quoteList(names))
				continue
			}
			cert = name
		}
		used[cert] = true
		domains := vb.Domains
		if len(domains) == 0 {
			domains = []string{"*"}
		}
		for i, d := range domains {
			rng := elemRange(vb.Body, "domains", i, vb.DefRange)
			host := strings.ToLower(d)
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h // SNI carries no port
			}
			if host == "" || host == "*" || strings.HasSuffix(host, "*") || (strings.HasPrefix(host, "*") && !strings.HasPrefix(host, "*.")) || strings.Count(host, "*") > 1 {
				// No server name can stand for this domain; clients asking
				// for it get the default certificate.
				if cert != t.Default {
					r.add(rng, "Domain cannot select a certificate",
						"virtual_host %q selects certificate %q, but TLS clients name a server exactly or under a \"*.\" wildcard, so domain %q cannot select it: clients that reach this domain get the default certificate %q. Set default_certificate = %q on the listener, or list exact domains.", vb.Name, cert, d, t.Default, cert)
				}
				continue
			}
			if c, ok := owner[host]; ok {
				if c.cert != cert {
					r.add(rng, "Conflicting certificates for a server name",
						"server name %q selects certificate %q here but %q in virtual_host %q at %s; one server name gets one certificate.", host, cert, c.cert, c.vhost, pos(c.rng))
				}
				continue
			}
			owner[host] = claim{cert, vb.Name, rng}
			byCert[cert] = append(byCert[cert], host)
			if cert != t.Default {
				others = true
			}
		}
	}
	for _, c := range t.Certificates {
		if !used[c.Name] {
			r.warn(c.Range, "Unused certificate", "certificate %q of %s is not the default and no virtual_host selects it with tls { certificate = %q }, so no client gets it.", c.Name, where, c.Name)
		}
	}
	if !others {
		return
	}
	for _, cert := range slices.Sorted(maps.Keys(byCert)) {
		t.SNI = append(t.SNI, SNICertificate{Certificate: cert, ServerNames: slices.Sorted(slices.Values(byCert[cert]))})
	}
}
