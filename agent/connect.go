package agent

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/hashicorp/consul/api"
)

// Secret names of the local Connect identities, for policy and the mesh to
// refer to: one leaf per local service, and the trust bundle.
const (
	LeafSecretPrefix = "consul-connect/leaf/"
	RootsSecretName  = "consul-connect/roots"
)

// connectCerts follows the local Consul agent's Connect CA with blocking
// queries: the leaf certificate of each configured local service and the
// roots. The agent serves them over SDS to its local proxies, so private
// keys never leave the VM (the local Consul agent generates and renews
// them; it renews a leaf well before it expires and on a root rotation,
// which the blocking query returns at once). They are never written to the
// data directory, logged or shown.
type connectCerts struct {
	a        *Agent
	services []string

	mu      sync.Mutex
	leaves  map[string]*tlsv3.Secret
	roots   *tlsv3.Secret
	changed func()
	// stale names what the certificate files (certfiles.go) do not hold
	// yet: a service's leaf, or "" for the roots; a failed write is
	// retried on the next fetch, which a blocking query makes at least
	// every WaitTime.
	stale map[string]bool
}

// writeFiles writes what changed (or failed to be written last time) to
// the certificate directory, if one is configured. It logs no PEM.
func (c *connectCerts) writeFiles(what string, changed bool, write func(dir string) error) {
	dir := c.a.cfg.CertDir
	if dir == "" {
		return
	}
	c.mu.Lock()
	if c.stale == nil {
		c.stale = map[string]bool{}
	}
	if !changed && !c.stale[what] {
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	err := write(dir)
	c.mu.Lock()
	c.stale[what] = err != nil
	c.mu.Unlock()
	if err != nil {
		c.a.log.Error().Err(err).Str("cert_dir", dir).Msg("cannot write the Connect certificate files; proxyless gRPC keeps the ones it has")
	}
}

func (c *connectCerts) client() (*api.Client, error) {
	return c.a.consul.get()
}

func (c *connectCerts) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, svc := range c.services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.follow(ctx, "leaf "+svc, func(cl *api.Client, q *api.QueryOptions) (uint64, error) { return c.leaf(cl, svc, q) })
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); c.follow(ctx, "roots", c.fetchRoots) }()
	wg.Wait()
}

// follow repeats a blocking query until ctx ends, backing off on errors.
func (c *connectCerts) follow(ctx context.Context, what string, fetch func(*api.Client, *api.QueryOptions) (uint64, error)) {
	var index uint64
	backoff := c.a.cfg.BackoffInitial
	for ctx.Err() == nil {
		cl, err := c.client()
		if err == nil {
			var next uint64
			next, err = fetch(cl, (&api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Minute}).WithContext(ctx))
			if err == nil {
				if next < index {
					next = 0 // the index went back (agent restart): start over
				}
				index, backoff = next, c.a.cfg.BackoffInitial
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		c.a.log.Warn().Err(err).Str("connect", what).Msg("cannot read the local Consul agent's Connect CA; local proxies keep the certificates they have")
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, c.a.cfg.BackoffMax)
	}
}

func (c *connectCerts) leaf(cl *api.Client, svc string, q *api.QueryOptions) (uint64, error) {
	leaf, meta, err := cl.Agent().ConnectCALeaf(svc, q)
	if err != nil {
		return 0, err
	}
	s := &tlsv3.Secret{Name: LeafSecretPrefix + svc, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: leaf.CertPEM}},
		PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: leaf.PrivateKeyPEM}},
	}}}
	c.mu.Lock()
	old := c.leaves[svc]
	c.leaves[svc] = s
	c.mu.Unlock()
	changed := old == nil || old.GetTlsCertificate().GetCertificateChain().GetInlineString() != leaf.CertPEM
	c.writeFiles(svc, changed, func(dir string) error { return writeLeafFiles(dir, svc, leaf.CertPEM, leaf.PrivateKeyPEM) })
	if changed {
		c.a.log.Info().Str("service", svc).Str("serial", leaf.SerialNumber).Time("valid_before", leaf.ValidBefore).Msg("local Connect leaf certificate")
		c.changed()
	}
	return meta.LastIndex, nil
}

func (c *connectCerts) fetchRoots(cl *api.Client, q *api.QueryOptions) (uint64, error) {
	list, meta, err := cl.Agent().ConnectCARoots(q)
	if err != nil {
		return 0, err
	}
	var pems []string
	for _, r := range list.Roots {
		pems = append(pems, strings.TrimSpace(r.RootCertPEM))
	}
	slices.Sort(pems) // the order Consul lists them in must not move versions
	bundle := strings.Join(pems, "\n") + "\n"
	s := &tlsv3.Secret{Name: RootsSecretName, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: bundle}},
	}}}
	c.mu.Lock()
	old := c.roots
	c.roots = s
	c.mu.Unlock()
	changed := old == nil || old.GetValidationContext().GetTrustedCa().GetInlineString() != bundle
	c.writeFiles("", changed, func(dir string) error { return writeRootsFiles(dir, c.services, bundle) })
	if changed {
		c.a.log.Info().Int("roots", len(pems)).Str("active_root", list.ActiveRootID).Str("trust_domain", list.TrustDomain).Msg("local Connect CA roots")
		c.changed()
	}
	return meta.LastIndex, nil
}

// secrets returns the local secrets a key acting for services gets,
// sorted by name: those services' leaves (never another's: each holds
// its service's private key) and the roots, which every key may have.
func (c *connectCerts) secrets(services []string) []*tlsv3.Secret {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tlsv3.Secret
	for _, svc := range slices.Sorted(maps.Keys(c.leaves)) {
		if slices.Contains(services, svc) {
			out = append(out, c.leaves[svc])
		}
	}
	if c.roots != nil {
		out = append(out, c.roots)
	}
	return out
}
