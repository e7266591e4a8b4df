package xds

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	otelv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/open_telemetry/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	otlpcommonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Access logs of an HTTP listener: the connection manager's access_log
// list, each with its sink, format and filter.

// envoyDefaultFormat is Envoy's default access log format, the body of
// OpenTelemetry log records that set no format.
const envoyDefaultFormat = `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"`

func buildAccessLogs(listener string, logs []ir.AccessLog) []*accesslogv3.AccessLog {
	var out []*accesslogv3.AccessLog
	for i := range logs {
		al := &logs[i]
		f := logFormat(al)
		var name string
		var cfg proto.Message
		switch {
		case al.Collector != "":
			name, cfg = "envoy.access_loggers.open_telemetry", otelAccessLog(listener, al)
		case al.Path == "/dev/stdout":
			l := &streamv3.StdoutAccessLog{}
			if f != nil {
				l.AccessLogFormat = &streamv3.StdoutAccessLog_LogFormat{LogFormat: f}
			}
			name, cfg = "envoy.access_loggers.stdout", l
		case al.Path == "/dev/stderr":
			l := &streamv3.StderrAccessLog{}
			if f != nil {
				l.AccessLogFormat = &streamv3.StderrAccessLog_LogFormat{LogFormat: f}
			}
			name, cfg = "envoy.access_loggers.stderr", l
		default:
			l := &filev3.FileAccessLog{Path: al.Path}
			if f != nil {
				l.AccessLogFormat = &filev3.FileAccessLog_LogFormat{LogFormat: f}
			}
			name, cfg = "envoy.access_loggers.file", l
		}
		out = append(out, &accesslogv3.AccessLog{
			Name:       name,
			Filter:     accessLogFilter(listener, i, al),
			ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(cfg)},
		})
	}
	return out
}

// logFormat is a file or stream log's format; nil for Envoy's default.
func logFormat(al *ir.AccessLog) *corev3.SubstitutionFormatString {
	switch {
	case al.JSON != nil:
		fields := map[string]any{}
		for k, v := range al.JSON {
			fields[k] = v
		}
		st, err := structpb.NewStruct(fields)
		if err != nil {
			panic(fmt.Sprintf("access log json: %v", err)) // strings only: cannot fail
		}
		return &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: st}}
	case al.Format != "":
		return &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_TextFormatSource{
			TextFormatSource: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: al.Format}},
		}}
	}
	return nil
}

// otelAccessLog sends log records over OTLP/gRPC to the collector's
// cluster: the format is the body, json fields are attributes.
func otelAccessLog(listener string, al *ir.AccessLog) *otelv3.OpenTelemetryAccessLogConfig {
	body := cmpOr(strings.TrimSuffix(al.Format, "\n"), envoyDefaultFormat)
	out := &otelv3.OpenTelemetryAccessLogConfig{
		LogName:     listener,
		StatPrefix:  "access_log.",
		GrpcService: grpcCluster(al.Collector),
		Body:        &otlpcommonv1.AnyValue{Value: &otlpcommonv1.AnyValue_StringValue{StringValue: body}},
	}
	if al.JSON != nil {
		out.Body = nil
		out.Attributes = &otlpcommonv1.KeyValueList{}
		for _, k := range slices.Sorted(maps.Keys(al.JSON)) {
			out.Attributes.Values = append(out.Attributes.Values, &otlpcommonv1.KeyValue{Key: k, Value: &otlpcommonv1.AnyValue{Value: &otlpcommonv1.AnyValue_StringValue{StringValue: al.JSON[k]}}})
		}
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// grpcCluster calls a cluster with Envoy's own gRPC client.
func grpcCluster(cluster string) *corev3.GrpcService {
	return &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster}}}
}

// accessLogFilter keeps the requests the log wants: a status in one of
// the classes, at least the duration, a sample of them; nil logs all.
// Runtime keys are per listener and log, so an operator can override
// one through Envoy's runtime without touching the others.
func accessLogFilter(listener string, i int, al *ir.AccessLog) *accesslogv3.AccessLogFilter {
	key := fmt.Sprintf("access_log.%s.%d.", listener, i)
	cmp := func(op accesslogv3.ComparisonFilter_Op, v uint32, name string) *accesslogv3.ComparisonFilter {
		return &accesslogv3.ComparisonFilter{Op: op, Value: &corev3.RuntimeUInt32{DefaultValue: v, RuntimeKey: key + name}}
	}
	status := func(op accesslogv3.ComparisonFilter_Op, v uint32, name string) *accesslogv3.AccessLogFilter {
		return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{StatusCodeFilter: &accesslogv3.StatusCodeFilter{Comparison: cmp(op, v, name)}}}
	}
	var all []*accesslogv3.AccessLogFilter
	var classes []*accesslogv3.AccessLogFilter
	for _, c := range al.StatusClasses {
		// "5xx": 500 <= status <= 599 (the comparison has no "less than").
		lo := uint32(c[0]-'0') * 100
		classes = append(classes, &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{Filters: []*accesslogv3.AccessLogFilter{
			status(accesslogv3.ComparisonFilter_GE, lo, c+"_min"),
			status(accesslogv3.ComparisonFilter_LE, lo+99, c+"_max"),
		}}}})
	}
	switch len(classes) {
	case 0:
	case 1:
		all = append(all, classes[0])
	default:
		all = append(all, &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_OrFilter{OrFilter: &accesslogv3.OrFilter{Filters: classes}}})
	}
	if al.MinDuration > 0 {
		all = append(all, &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_DurationFilter{DurationFilter: &accesslogv3.DurationFilter{
			Comparison: cmp(accesslogv3.ComparisonFilter_GE, uint32(al.MinDuration.Milliseconds()), "min_duration_ms"),
		}}})
	}
	if al.SamplePercent < 100 {
		all = append(all, &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_RuntimeFilter{RuntimeFilter: &accesslogv3.RuntimeFilter{
			RuntimeKey:     key + "sample",
			PercentSampled: fraction(al.SamplePercent),
			// Independent of the request id, so one log's sample does not
			// decide another's (or tracing's).
			UseIndependentRandomness: true,
		}}})
	}
	switch len(all) {
	case 0:
		return nil
	case 1:
		return all[0]
	}
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{Filters: all}}}
}

// collectorClusters are the clusters a connection manager's access logs
// send to, for the consistency check.
func collectorClusters(hcm *hcmv3.HttpConnectionManager) []string {
	out := filterClusters(hcm)
	for _, al := range hcm.GetAccessLog() {
		if al.GetName() != "envoy.access_loggers.open_telemetry" {
			continue
		}
		c := &otelv3.OpenTelemetryAccessLogConfig{}
		if al.GetTypedConfig().UnmarshalTo(c) == nil {
			out = append(out, c.GetGrpcService().GetEnvoyGrpc().GetClusterName())
		}
	}
	if p := hcm.GetTracing().GetProvider(); p != nil {
		c := &tracev3.OpenTelemetryConfig{}
		if p.GetTypedConfig().UnmarshalTo(c) == nil {
			out = append(out, c.GetGrpcService().GetEnvoyGrpc().GetClusterName())
		}
	}
	return out
}

// listenerClusters are the clusters the HTTP connection managers of a
// listener's filter chains call besides their routes' (collectors).
func listenerClusters(l *listenerv3.Listener) []string {
	var out []string
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			h := &hcmv3.HttpConnectionManager{}
			if f.GetName() == wellknown.HTTPConnectionManager && f.GetTypedConfig().UnmarshalTo(h) == nil {
				out = append(out, collectorClusters(h)...)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// clusterNameSet is the names of r's clusters.
func clusterNameSet(r *Resources) map[string]bool {
	have := make(map[string]bool, len(r.Clusters))
	for _, c := range r.Clusters {
		have[c.GetName()] = true
	}
	return have
}

// clustersServed checks that every cluster a listener's filters call is
// served: Envoy would otherwise drop its logs silently.
func clustersServed(have map[string]bool, listeners []*listenerv3.Listener, ref func(types.Resource) references) error {
	var errs []error
	for _, l := range listeners {
		for _, c := range ref(l).clusters {
			if !have[c] {
				errs = append(errs, fmt.Errorf("listener %q calls cluster %q, which is not served", l.GetName(), c))
			}
		}
	}
	return errors.Join(errs...)
}
