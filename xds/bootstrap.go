package xds

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// BootstrapConfig describes the Envoy that `bootstrap` writes a file for.
type BootstrapConfig struct {
	NodeID  string
	Cluster string // node.cluster: selects the proxy group
	// XDS lists bridge addresses (host:port); several make Envoy spread
	// over replicas and fail over between them.
	XDS []string
	// XDSUnix is a Unix socket path used instead of XDS.
	XDSUnix string
	// AdminPort is Envoy's admin listener on 127.0.0.1.
	AdminPort int
	// TLSCAFile, if set, makes Envoy reach the bridge over TLS verified
	// with this CA.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are the client certificate and key the
	// proxy presents to the bridge (mTLS: the bridge's client_ca_file and
	// authorize_nodes need them). Paths on the proxy's host.
	TLSCertFile, TLSKeyFile string
	// TLSServerName is the bridge's name in its certificate: sent as SNI
	// and required as a subject alternative name, so a certificate of the
	// same CA issued to something else (another proxy's client
	// certificate, say) cannot pose as the bridge. Default: the host of
	// the first XDS address.
	TLSServerName string
	// REST makes Envoy poll CDS and LDS with REST-JSON (api_type REST,
	// HTTP/1.1 cluster xds_rest_cluster to the same bridge port) every
	// RESTRefresh (default 1s) instead of taking them over ADS. The
	// endpoints, routes and secrets they name keep their ADS config
	// sources, so the ADS stream stays for those.
	REST        bool
	RESTRefresh time.Duration
	// LocalService names the service this Envoy belongs to: it becomes
	// the static cluster local_service (endpoints over ADS) named as
	// cluster_manager.local_cluster_name, which Envoy's zone aware routing
	// needs. Region and Zone are the proxy's locality (region: the Consul
	// datacenter; zone: its node's "zone" meta), matched against the
	// endpoints' localities.
	LocalService string
	Region, Zone string
	// MeshCertDir, in a proxyless gRPC bootstrap, is the directory of one
	// service's Connect certificate files as the per-VM agent writes them
	// (its connect.cert_dir/SERVICE): the bootstrap gets a file_watcher
	// certificate provider instance MeshCertProvider reading them, which
	// the mesh's gRPC listeners and clusters name (meshgrpc.go), and the
	// server listener template grpc-go's xDS server needs. Refreshed every
	// MeshCertRefresh (default DefaultMeshCertRefresh).
	MeshCertDir     string
	MeshCertRefresh time.Duration
	// ConsulNode, for a Connect sidecar known by its proxy id (NodeID),
	// is the Consul node it is registered on: node metadata
	// ConsulNodeMetadata, which picks the right registration when the
	// same proxy id is registered on several nodes (as web-sidecar-proxy
	// is on every VM running web).
	ConsulNode string
}

// ConsulNodeMetadata is the node metadata key (a string) naming the
// Consul node of a sidecar (BootstrapConfig.ConsulNode).
const ConsulNodeMetadata = "consul_node"

// RelayedEnvoysMetadata is the node metadata key (a string) with which a
// per-VM agent's relay stream tells the central bridge the Envoys it
// relays for: "NODE-ID@VERSION" entries joined by ",", for /v1/proxies
// only (the central bridge serves the relay the newest output whatever
// they run; the agent rewrites it per version).
const RelayedEnvoysMetadata = "consul_xds_bridge_relayed_envoys"

// The proxyless mesh's certificate files and the gRPC bootstrap's
// provider instance that reads them.
const (
	// MeshCertProvider is the certificate provider instance (gRFC A29)
	// of a gRPC bootstrap with -mesh-cert-dir: the service's Connect leaf
	// and key as identity, the Connect CA roots as trust bundle.
	MeshCertProvider = ir.MeshGRPCCertProvider
	// MeshCertFile, MeshKeyFile and MeshRootsFile are the files in a
	// service's certificate directory.
	MeshCertFile  = "cert.pem"
	MeshKeyFile   = "key.pem"
	MeshRootsFile = "roots.pem"
	// DefaultMeshCertRefresh is how often gRPC re-reads them: a rotated
	// leaf or a new root is in use within this.
	DefaultMeshCertRefresh = 5 * time.Second
	// GRPCServerListenerTemplate is the bootstrap's
	// server_listener_resource_name_template: grpc-go's xDS server asks
	// LDS for the listener named by it with its listening address
	// ("grpc/server?xds.resource.listening_address=10.0.0.5:8443").
	GRPCServerListenerTemplate = "grpc/server?xds.resource.listening_address=%s"
)

// localClusterName is the bootstrap's static cluster of the proxy's own
// service. It is not named like the service, so the service's cluster
// over CDS, if the group routes to it too, is another cluster.
const localClusterName = "local_service"

// xdsRESTClusterName is the static cluster of REST polls: the same
// bridge endpoints as xdsClusterName, over HTTP/1.1, which the bridge's
// xDS port tells from gRPC by the connection's first bytes.
const xdsRESTClusterName = "xds_rest_cluster"

// tlsChecks validates the TLS settings and returns the server name the
// bridge's certificate must carry ("" without TLS).
func (c BootstrapConfig) tlsChecks() (string, error) {
	if c.TLSCAFile == "" {
		if c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSServerName != "" {
			return "", fmt.Errorf("-tls-cert, -tls-key and -tls-server-name need -tls-ca (TLS to the bridge)")
		}
		return "", nil
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return "", fmt.Errorf("-tls-cert and -tls-key go together")
	}
	name := c.TLSServerName
	if name == "" && len(c.XDS) > 0 {
		host, _, err := net.SplitHostPort(c.XDS[0])
		if err != nil {
			return "", fmt.Errorf("xds address %q: %w (want HOST:PORT)", c.XDS[0], err)
		}
		name = host
	}
	return name, nil
}

// xdsClusterName is the static cluster through which Envoy reaches the bridge.
const xdsClusterName = "xds_cluster"

// Bootstrap builds an Envoy bootstrap that takes LDS and CDS (and through
// them RDS and EDS) from the bridge over one ADS stream, in the shape of
// go-control-plane's example bootstrap-xds.yaml.
func Bootstrap(c BootstrapConfig) (*bootstrapv3.Bootstrap, error) {
	if c.NodeID == "" || c.Cluster == "" {
		return nil, fmt.Errorf("bootstrap needs a node id and a cluster (proxy group)")
	}
	if len(c.XDS) == 0 && c.XDSUnix == "" {
		return nil, fmt.Errorf("bootstrap needs the bridge's xDS address (-xds HOST:PORT or -xds-unix PATH)")
	}
	serverName, err := c.tlsChecks()
	if err != nil {
		return nil, err
	}
	if c.TLSCAFile != "" && serverName == "" {
		return nil, fmt.Errorf("-tls-server-name is needed with -xds-unix: the name in the bridge's certificate")
	}
	xds := &clusterv3.Cluster{
		Name:           xdsClusterName,
		ConnectTimeout: durationpb.New(time.Second),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: xdsClusterName},
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(&httpv3.HttpProtocolOptions{
				UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
				}},
			}),
		},
	}
	lle := &endpointv3.LocalityLbEndpoints{}
	dns := false
	if c.XDSUnix != "" {
		lle.LbEndpoints = append(lle.LbEndpoints, lbEndpoint(&corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: c.XDSUnix}}}))
	}
	for _, addr := range c.XDS {
		host, portStr, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("xds address %q: %w (want HOST:PORT)", addr, err)
		}
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || port == 0 {
			return nil, fmt.Errorf("xds address %q: bad port", addr)
		}
		if _, err := netip.ParseAddr(host); err != nil {
			dns = true
		}
		lle.LbEndpoints = append(lle.LbEndpoints, lbEndpoint(socketAddress(host, uint32(port))))
	}
	xds.LoadAssignment.Endpoints = []*endpointv3.LocalityLbEndpoints{lle}
	if dns {
		// A DNS name (e.g. one resolving to several bridge replicas) is
		// re-resolved by Envoy; plain IPs need no resolver.
		xds.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}
	} else {
		xds.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
	}
	if c.TLSCAFile != "" {
		xds.TransportSocket = bridgeTLS(c, serverName, "h2")
	}
	clusters := []*clusterv3.Cluster{xds}
	cds, lds := adsSource(), adsSource()
	if c.REST {
		rest := &clusterv3.Cluster{
			Name: xdsRESTClusterName, ConnectTimeout: xds.ConnectTimeout, ClusterDiscoveryType: xds.ClusterDiscoveryType,
			LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: xdsRESTClusterName, Endpoints: xds.LoadAssignment.Endpoints},
		}
		if c.TLSCAFile != "" {
			rest.TransportSocket = bridgeTLS(c, serverName, "http/1.1")
		}
		clusters = append(clusters, rest)
		refresh := c.RESTRefresh
		if refresh <= 0 {
			refresh = time.Second
		}
		cds, lds = restSource(refresh), restSource(refresh)
	}
	var cm *bootstrapv3.ClusterManager
	if c.LocalService != "" {
		clusters = append(clusters, &clusterv3.Cluster{
			Name:                 localClusterName,
			ConnectTimeout:       durationpb.New(time.Second),
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: c.LocalService},
		})
		cm = &bootstrapv3.ClusterManager{LocalClusterName: localClusterName}
	}
	var locality *corev3.Locality
	if c.Region != "" || c.Zone != "" {
		locality = &corev3.Locality{Region: c.Region, Zone: c.Zone}
	}
	adminPort := c.AdminPort
	if adminPort == 0 {
		adminPort = 19000
	}
	return &bootstrapv3.Bootstrap{
		Node:           &corev3.Node{Id: c.NodeID, Cluster: c.Cluster, Locality: locality, Metadata: c.nodeMetadata()},
		ClusterManager: cm,
		Admin: &bootstrapv3.Admin{
			Address: socketAddress("127.0.0.1", uint32(adminPort)),
		},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:             corev3.ApiConfigSource_GRPC,
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{
					TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: xdsClusterName}},
				}},
				SetNodeOnFirstMessageOnly: true,
			},
			CdsConfig: cds,
			LdsConfig: lds,
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: clusters},
	}, nil
}

func sameHost(hostPort, name string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	return err == nil && host == name
}

// bridgeTLS is Envoy's TLS to the bridge, from files on Envoy's own host
// (the connection exists before any SDS): the CA, the bridge's name as SNI
// and as the SAN its certificate must have (DNS, or IP for an address),
// and the client certificate if one is given; HTTP/2 for gRPC.
func bridgeTLS(c BootstrapConfig, serverName, alpn string) *corev3.TransportSocket {
	san := &tlsv3.SubjectAltNameMatcher{
		SanType: tlsv3.SubjectAltNameMatcher_DNS,
		Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: serverName}},
	}
	if _, err := netip.ParseAddr(serverName); err == nil {
		san.SanType = tlsv3.SubjectAltNameMatcher_IP_ADDRESS
	}
	common := &tlsv3.CommonTlsContext{
		AlpnProtocols: []string{alpn},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa:                 &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: c.TLSCAFile}},
			MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{san},
		}},
	}
	if c.TLSCertFile != "" {
		common.TlsCertificates = []*tlsv3.TlsCertificate{{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: c.TLSCertFile}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: c.TLSKeyFile}},
		}}
	}
	sni := serverName
	if san.SanType == tlsv3.SubjectAltNameMatcher_IP_ADDRESS {
		sni = "" // SNI carries host names only (RFC 6066)
	}
	return tlsSocket(&tlsv3.UpstreamTlsContext{Sni: sni, CommonTlsContext: common})
}

// restSource polls the bridge with REST-JSON.
func restSource(refresh time.Duration) *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion: corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
			ApiType:             corev3.ApiConfigSource_REST,
			TransportApiVersion: corev3.ApiVersion_V3,
			ClusterNames:        []string{xdsRESTClusterName},
			RefreshDelay:        durationpb.New(refresh),
			RequestTimeout:      durationpb.New(5 * time.Second),
		}},
	}
}

func lbEndpoint(addr *corev3.Address) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}}}
}

// GRPCBootstrap renders the xDS bootstrap JSON of a proxyless gRPC client
// (GRPC_XDS_BOOTSTRAP file or GRPC_XDS_BOOTSTRAP_CONFIG value, gRFC A27)
// that reaches the bridge over ADS. gRPC sets node.user_agent_name itself
// ("gRPC Go", ...), which is how the bridge tells it from an Envoy. c.XDS
// entries beyond the first are fallback servers (gRFC A71); AdminPort does
// not apply. The node cluster may be empty: every gRPC client gets the
// same API listeners, and a cluster only matters to place it in a proxy
// group declared proxyless.
func GRPCBootstrap(c BootstrapConfig) ([]byte, error) {
	if c.NodeID == "" {
		return nil, fmt.Errorf("bootstrap needs a node id")
	}
	if len(c.XDS) == 0 && c.XDSUnix == "" {
		return nil, fmt.Errorf("bootstrap needs the bridge's xDS address (-xds HOST:PORT or -xds-unix PATH)")
	}
	type creds struct {
		Type   string         `json:"type"`
		Config map[string]any `json:"config,omitempty"`
	}
	type server struct {
		ServerURI      string   `json:"server_uri"`
		ChannelCreds   []creds  `json:"channel_creds"`
		ServerFeatures []string `json:"server_features"`
	}
	type node struct {
		ID      string `json:"id"`
		Cluster string `json:"cluster,omitempty"`
		// Locality is always written, empty: gRFC A27 makes it optional,
		// but grpc-node refuses a bootstrap whose node has none
		// ("locality field missing in node element").
		Locality struct{} `json:"locality"`
	}
	if _, err := c.tlsChecks(); err != nil {
		return nil, err
	}
	cr := creds{Type: "insecure"}
	if c.TLSCAFile != "" {
		// gRPC's "tls" channel credentials (gRFC A65) verify the host of
		// server_uri against the certificate, as any gRPC TLS dial does
		// ("localhost" for a Unix socket); there is no separate name to
		// set, so a -tls-server-name must be that host.
		if c.TLSServerName != "" && (c.XDSUnix != "" || !sameHost(c.XDS[0], c.TLSServerName)) {
			return nil, fmt.Errorf("a gRPC client verifies the bridge by the host in -xds HOST:PORT; give the name in the bridge's certificate there (not -tls-server-name or -xds-unix)")
		}
		cfg := map[string]any{"ca_certificate_file": c.TLSCAFile}
		if c.TLSCertFile != "" {
			cfg["certificate_file"], cfg["private_key_file"] = c.TLSCertFile, c.TLSKeyFile
		}
		cr = creds{Type: "tls", Config: cfg}
	}
	var uris []string
	if c.XDSUnix != "" {
		uris = append(uris, "unix://"+c.XDSUnix)
	}
	for _, addr := range c.XDS {
		_, portStr, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("xds address %q: %w (want HOST:PORT)", addr, err)
		}
		if port, err := strconv.ParseUint(portStr, 10, 16); err != nil || port == 0 {
			return nil, fmt.Errorf("xds address %q: bad port", addr)
		}
		uris = append(uris, addr)
	}
	var servers []server
	for _, u := range uris {
		// ignore_resource_deletion (gRFC A53): a listener or cluster that
		// vanishes from a response (a bridge restarting with a partial
		// policy, a bad push) leaves the client serving the last one it
		// had instead of failing its RPCs; the bridge never pushes a world
		// without a complete Consul sync, so real removals are rare and
		// this is the safe side.
		servers = append(servers, server{ServerURI: u, ChannelCreds: []creds{cr}, ServerFeatures: []string{"xds_v3", "ignore_resource_deletion"}})
	}
	type provider struct {
		PluginName string         `json:"plugin_name"`
		Config     map[string]any `json:"config"`
	}
	var providers map[string]provider
	var template string
	if c.MeshCertDir != "" {
		if !filepath.IsAbs(c.MeshCertDir) {
			return nil, fmt.Errorf("-mesh-cert-dir %q must be an absolute path (gRPC reads the files from wherever it runs)", c.MeshCertDir)
		}
		refresh := c.MeshCertRefresh
		if refresh <= 0 {
			refresh = DefaultMeshCertRefresh
		}
		providers = map[string]provider{MeshCertProvider: {PluginName: "file_watcher", Config: map[string]any{
			"certificate_file":    filepath.Join(c.MeshCertDir, MeshCertFile),
			"private_key_file":    filepath.Join(c.MeshCertDir, MeshKeyFile),
			"ca_certificate_file": filepath.Join(c.MeshCertDir, MeshRootsFile),
			"refresh_interval":    strconv.FormatFloat(refresh.Seconds(), 'f', -1, 64) + "s", // protojson's Duration
		}}}
		template = GRPCServerListenerTemplate
	}
	b, err := json.MarshalIndent(struct {
		XDSServers []server            `json:"xds_servers"`
		Node       node                `json:"node"`
		Providers  map[string]provider `json:"certificate_providers,omitempty"`
		Template   string              `json:"server_listener_resource_name_template,omitempty"`
	}{servers, node{ID: c.NodeID, Cluster: c.Cluster}, providers, template}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func (c BootstrapConfig) nodeMetadata() *structpb.Struct {
	if c.ConsulNode == "" {
		return nil
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{ConsulNodeMetadata: structpb.NewStringValue(c.ConsulNode)}}
}
