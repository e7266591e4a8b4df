// Package envoynode makes the Node an Envoy presents to its management
// server, for tests and the load harness.
//
// Envoy fills node.extensions with every extension factory it was built
// with (name, category, config types), and by default
// (set_node_on_first_message_only: false) sends the whole node with
// every discovery request, ACKs included. Operators report 11 KiB
// (envoyproxy/envoy#12138) to 23 KiB (Istio's build, envoyproxy/envoy#15838)
// per request. A simulated proxy with a three-field node hides what that
// costs a control plane: decoding it on every ACK, and keeping it.
package envoynode

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// categories lists extension categories and the factories of each, after
// the extension list of an upstream Envoy build. Only the sizes matter
// here; the names make a dump readable.
var categories = []struct {
	category string
	names    string // space-separated, each under "envoy.<category>."
}{
	{"access_loggers", "file fluentd http_grpc tcp_grpc open_telemetry stdout stderr wasm"},
	{"clusters", "aggregate dns dynamic_forward_proxy eds redis static strict_dns original_dst logical_dns"},
	{"compression.compressor", "gzip brotli zstd"},
	{"compression.decompressor", "gzip brotli zstd"},
	{"health_checkers", "redis thrift tcp http grpc"},
	{"matching.input_matchers", "consistent_hashing ip runtime_fraction cel_matcher metadata_matcher"},
	{"matching.network.input", "application_protocol destination_ip destination_port source_ip source_port direct_source_ip source_type server_name transport_protocol filter_state"},
	{"matching.http.input", "request_headers request_trailers response_headers response_trailers query_params cel_data_input dynamic_metadata"},
	{"filters.http", "adaptive_concurrency admission_control alternate_protocols_cache api_key_auth aws_lambda aws_request_signing bandwidth_limit basic_auth buffer cache cdn_loop compressor cors composite connect_grpc_bridge credential_injector csrf custom_response decompressor dynamic_forward_proxy ext_authz ext_proc fault file_system_buffer gcp_authn geoip grpc_field_extraction grpc_http1_bridge grpc_http1_reverse_bridge grpc_json_transcoder grpc_stats grpc_web header_to_metadata health_check ip_tagging json_to_metadata jwt_authn rate_limit_quota local_ratelimit lua oauth2 on_demand original_src ratelimit rbac router set_filter_state set_metadata tap wasm stateful_session header_mutation"},
	{"filters.listener", "http_inspector local_ratelimit original_dst original_src proxy_protocol tls_inspector"},
	{"filters.network", "connection_limit direct_response dubbo_proxy echo ext_authz ext_proc http_connection_manager local_ratelimit mongo_proxy ratelimit rbac redis_proxy tcp_proxy thrift_proxy sni_cluster sni_dynamic_forward_proxy wasm zookeeper_proxy generic_proxy set_filter_state"},
	{"filters.udp_listener", "dns_filter udp_proxy"},
	{"resource_monitors", "fixed_heap injected_resource downstream_connections cgroup_memory"},
	{"retry_priority", "previous_priorities"},
	{"retry_host_predicates", "previous_hosts omit_canary_hosts omit_host_metadata"},
	{"stat_sinks", "dog_statsd graphite_statsd hystrix metrics_service open_telemetry statsd wasm"},
	{"tracers", "datadog dynamic_ot opencensus skywalking xray zipkin opentelemetry fluentd"},
	{"transport_sockets.upstream", "alts http_11_proxy internal_upstream proxy_protocol raw_buffer starttls tap tcp_stats tls quic"},
	{"transport_sockets.downstream", "alts raw_buffer starttls tap tcp_stats tls quic"},
	{"http.original_ip_detection", "custom_header xff"},
	{"http.stateful_session", "cookie header"},
	{"http.header_validators", "default"},
	{"http.custom_response", "local_response_policy redirect_policy"},
	{"http.early_header_mutation", "header_mutation"},
	{"load_balancing_policies", "cluster_provided least_request random round_robin maglev ring_hash subset client_side_weighted_round_robin wrr_locality override_host"},
	{"upstreams.http", "generic http tcp udp"},
	{"upstreams.tcp", "generic"},
	{"formatter", "cel metadata req_without_query"},
	{"rbac.matchers", "upstream_ip_port"},
	{"rbac.principals", "mtls_authenticated"},
	{"network.dns_resolver", "cares getaddrinfo"},
	{"tls.cert_validator", "default spiffe"},
	{"wasm.runtime", "null v8"},
	{"bootstrap", "internal_listener wasm"},
	{"config_subscription", "rest filesystem grpc delta_grpc ads delta_ads aggregated_grpc_collection"},
	{"quic.connection_id_generator", "deterministic"},
	{"quic.proof_source", "filter_chain"},
	{"regex_engines", "google_re2"},
	{"path.match", "uri_template"},
	{"path.rewrite", "uri_template"},
	{"request_id", "uuid"},
	{"common.key_value", "file_based"},
	{"config.validators", "minimum_clusters_validator"},
	{"grpc_credentials", "file_based_metadata"},
	{"health_check.event_sinks", "file"},
	{"thrift_proxy.filters", "header_to_metadata payload_to_metadata rate_limit router"},
	{"thrift_proxy.protocols", "auto binary compact twitter"},
	{"thrift_proxy.transports", "auto framed header unframed"},
	{"dubbo_proxy.filters", "router"},
	{"dubbo_proxy.protocols", "dubbo"},
	{"dubbo_proxy.serializers", "dubbo.hessian2"},
	{"generic_proxy.codecs", "dubbo http1 kafka"},
	{"guarddog_actions", "abort_action profile_action"},
	{"internal_redirect_predicates", "allow_listed_routes previous_routes safe_cross_scheme"},
	{"http.cache", "file_system_http_cache simple_http_cache"},
	{"rate_limit_descriptors", "expr"},
	{"route.early_data_policy", "default"},
	{"matching.action", "format_string"},
	{"udp_packet_writer", "default gso"},
	{"watchdog", "profile_action"},
	{"listener_manager_impl", "default validation"},
	{"connection_handler", "default"},
}

// Extensions is the extension list an Envoy build reports in its node.
func Extensions() []*corev3.Extension {
	var exts []*corev3.Extension
	for _, c := range categories {
		category := "envoy." + c.category
		for _, name := range strings.Fields(c.names) {
			ext := &corev3.Extension{Name: category + "." + name, Category: category}
			// Factories with a configuration proto name its type.
			if configured(c.category) {
				ext.TypeUrls = []string{"envoy.extensions." + c.category + "." + name + ".v3." + camel(name)}
			}
			exts = append(exts, ext)
		}
	}
	return exts
}

// New is the node an Envoy 1.25 (the newest Consul 1.15 accepts) with id
// and cluster presents: user agent, build version, client features, its
// extensions and a little metadata.
func New(id, cluster string) *corev3.Node {
	return &corev3.Node{
		Id: id, Cluster: cluster, UserAgentName: "envoy",
		UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{
			Version: &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 25, Patch: 4},
			Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
				"revision.sha":    structpb.NewStringValue("8f5f0c8d6f9e37a1d5c3b7e2a4f6d8c0b1e3a5c7"),
				"revision.status": structpb.NewStringValue("Clean"),
				"build.type":      structpb.NewStringValue("RELEASE"),
				"ssl.version":     structpb.NewStringValue("BoringSSL"),
			}},
		}},
		Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			"namespace": structpb.NewStringValue("default"),
			"partition": structpb.NewStringValue("default"),
		}},
		ClientFeatures: []string{"envoy.config.require-any-fields-contain-struct", "envoy.lb.does_not_support_overprovisioning", "envoy.lrs.supports_send_all_clusters", "xds.config.resource-in-sotw"},
		Extensions:     Extensions(),
	}
}

func configured(category string) bool {
	for _, p := range []string{"filters.", "access_loggers", "clusters", "tracers", "stat_sinks", "transport_sockets.", "load_balancing_policies"} {
		if strings.HasPrefix(category, p) {
			return true
		}
	}
	return false
}

func camel(s string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == '_' || r == '.' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}
