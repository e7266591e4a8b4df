package adsclient

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// TLSFromEnvoyBootstrap builds the TLS configuration Envoy would use to
// reach the bridge from an Envoy bootstrap's static cluster of that name
// (xds_cluster, or xds_rest_cluster of `bootstrap -rest`): its CA,
// client certificate and key files are loaded, SNI is the context's sni,
// and the server's certificate must chain to the CA and carry one of the
// match_typed_subject_alt_names, as Envoy checks it (Envoy does not match
// the SNI against the certificate; the SAN matchers do that). Tests use
// it to connect with exactly what a bootstrap says.
func TLSFromEnvoyBootstrap(b *bootstrapv3.Bootstrap, cluster string) (*tls.Config, error) {
	var up tlsv3.UpstreamTlsContext
	found := false
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == cluster && c.GetTransportSocket() != nil {
			if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&up); err != nil {
				return nil, fmt.Errorf("%s transport socket: %w", cluster, err)
			}
			found = true
		}
	}
	if !found {
		return nil, fmt.Errorf("the bootstrap's %s has no TLS transport socket", cluster)
	}
	common := up.GetCommonTlsContext()
	vc := common.GetValidationContext()
	roots, err := loadPool(vc.GetTrustedCa().GetFilename())
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		ServerName: up.GetSni(),
		NextProtos: common.GetAlpnProtocols(),
		MinVersion: tls.VersionTLS12,
		// Verified below, like Envoy: chain to the CA, then SAN matchers.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the bridge presented no certificate")
			}
			leaf := cs.PeerCertificates[0]
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err != nil {
				return err
			}
			return matchSANs(leaf, vc.GetMatchTypedSubjectAltNames())
		},
	}
	if certs := common.GetTlsCertificates(); len(certs) > 0 {
		pair, err := tls.LoadX509KeyPair(certs[0].GetCertificateChain().GetFilename(), certs[0].GetPrivateKey().GetFilename())
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// matchSANs accepts a certificate with one of the exact DNS or IP SANs of
// the matchers; no matchers accept any (Envoy's behaviour without them).
func matchSANs(leaf *x509.Certificate, matchers []*tlsv3.SubjectAltNameMatcher) error {
	if len(matchers) == 0 {
		return nil
	}
	var want []string
	for _, m := range matchers {
		exact := m.GetMatcher().GetExact()
		want = append(want, exact)
		switch m.GetSanType() {
		case tlsv3.SubjectAltNameMatcher_DNS:
			if slices.Contains(leaf.DNSNames, exact) {
				return nil
			}
		case tlsv3.SubjectAltNameMatcher_IP_ADDRESS:
			ip, err := netip.ParseAddr(exact)
			if err == nil && slices.ContainsFunc(leaf.IPAddresses, func(a net.IP) bool { return a.Equal(ip.AsSlice()) }) {
				return nil
			}
		}
	}
	return fmt.Errorf("the bridge's certificate (DNS %v, IP %v) matches none of the expected names %v", leaf.DNSNames, leaf.IPAddresses, want)
}

// TLSFromGRPCBootstrap builds the TLS configuration of a proxyless gRPC
// client from its xDS bootstrap JSON (the first server's "tls" channel
// credentials, gRFC A65) and returns the server's address. As in gRPC,
// the server is verified against the host of server_uri.
func TLSFromGRPCBootstrap(js []byte) (*tls.Config, string, error) {
	var b struct {
		XDSServers []struct {
			ServerURI    string `json:"server_uri"`
			ChannelCreds []struct {
				Type   string            `json:"type"`
				Config map[string]string `json:"config"`
			} `json:"channel_creds"`
		} `json:"xds_servers"`
	}
	if err := json.Unmarshal(js, &b); err != nil {
		return nil, "", err
	}
	if len(b.XDSServers) == 0 || len(b.XDSServers[0].ChannelCreds) == 0 || b.XDSServers[0].ChannelCreds[0].Type != "tls" {
		return nil, "", errors.New("the bootstrap's first xDS server has no tls channel credentials")
	}
	s := b.XDSServers[0]
	conf := s.ChannelCreds[0].Config
	roots, err := loadPool(conf["ca_certificate_file"])
	if err != nil {
		return nil, "", err
	}
	host, _, err := net.SplitHostPort(s.ServerURI)
	if err != nil {
		return nil, "", fmt.Errorf("server_uri %q: %w", s.ServerURI, err)
	}
	cfg := &tls.Config{RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12}
	if conf["certificate_file"] != "" {
		pair, err := tls.LoadX509KeyPair(conf["certificate_file"], conf["private_key_file"])
		if err != nil {
			return nil, "", fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, s.ServerURI, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA file %s holds no certificate", file)
	}
	return pool, nil
}
