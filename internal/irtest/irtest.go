// Package irtest builds small ir models for the tests of the stages that
// consume them (translation, serving), so each does not keep its own copy.
package irtest

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Cluster is an EDS cluster for service name with the given endpoints.
func Cluster(name string, eps ...ir.Endpoint) *ir.Cluster {
	return &ir.Cluster{Name: name, Service: name, ConnectTimeout: time.Second, Endpoints: eps}
}

// Endpoint is a healthy endpoint on port 8080 in datacenter dc.
func Endpoint(addr string, prio uint32, dc string) ir.Endpoint {
	return ir.Endpoint{Address: netip.MustParseAddr(addr), Port: 8080, Weight: 1, Priority: prio, Locality: ir.Locality{Region: dc}}
}

// HTTPListener is an HTTP listener on port 8080 with one virtual host for
// every domain.
func HTTPListener(name string, routes ...ir.Route) ir.Listener {
	return ir.Listener{
		Name: name, Address: "0.0.0.0", Port: 8080, Protocol: "http",
		VirtualHosts: []ir.VirtualHost{{Name: "all", Domains: []string{"*"}, Routes: routes}},
	}
}

// RouteTo routes a path prefix to weighted clusters.
func RouteTo(prefix string, clusters ...ir.WeightedCluster) ir.Route {
	return ir.Route{Source: "test.hcl:" + prefix, Match: ir.RouteMatch{PathPrefix: prefix, CaseSensitive: true}, Clusters: clusters}
}

const (
	fakeCert = "-----BEGIN CERTIFICATE-----\nCERT-%s\n-----END CERTIFICATE-----\n"
	fakeKey  = "-----BEGIN PRIVATE KEY-----\nKEY-%s\n-----END PRIVATE KEY-----\n"
)

// CertSecret is a certificate secret whose PEM contents are tagged with v.
func CertSecret(name, v string) ir.Secret {
	return ir.Secret{Name: name, CertificateChain: []byte(strings.ReplaceAll(fakeCert, "%s", v)), PrivateKey: []byte(strings.ReplaceAll(fakeKey, "%s", v))}
}

// TLSModel is cluster "api" with mTLS to its upstream (shared secrets), and
// group "edge" with a TLS listener serving "shop" by default and "blog" by
// SNI, certificate contents tagged with v.
func TLSModel(v string) *ir.Model {
	api := Cluster("api", Endpoint("10.0.0.1", 0, "dc1"))
	api.TLS = &ir.UpstreamTLS{SNI: "api.internal", CertificateSecret: "api/cert", CASecret: "api/ca"}
	l := HTTPListener("edge.https", RouteTo("/", ir.WeightedCluster{Name: "api", Weight: 1}))
	l.TLS = &ir.DownstreamTLS{
		DefaultCertificate: "edge.https/cert/shop",
		SNI:                []ir.SNICertificate{{Secret: "edge.https/cert/blog", ServerNames: []string{"blog.example.com"}}},
		ALPN:               []string{"h2", "http/1.1"},
	}
	return Reach(&ir.Model{
		Clusters: []*ir.Cluster{api},
		Secrets:  []ir.Secret{{Name: "api/ca", TrustedCA: []byte("CA")}, CertSecret("api/cert", "client")},
		Groups: []ir.Group{{
			Name:      "edge",
			Listeners: []ir.Listener{l},
			Secrets:   []ir.Secret{CertSecret("edge.https/cert/blog", "blog-"+v), CertSecret("edge.https/cert/shop", "shop-"+v)},
		}},
	})
}

// Reach fills in what each group may see the way model.Build does for a
// model built by hand: a group gets the clusters its listeners (or, if
// proxyless, the API listeners) use, the proxyless clients those of
// m.Proxyless, and nodes in no group every cluster. It returns m.
func Reach(m *ir.Model) *ir.Model {
	used := func(ls []ir.Listener) []string {
		out := []string{}
		for i := range ls {
			for _, n := range ls[i].ClusterRefs() {
				if m.Cluster(n) != nil && !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	for i := range m.Groups {
		g := &m.Groups[i]
		if g.Proxyless {
			g.Clusters = used(m.ProxylessFor(g))
		} else {
			g.Clusters = used(g.Listeners)
		}
	}
	m.ProxylessClusters = used(m.Proxyless)
	m.UnmatchedAll = true
	return m
}
