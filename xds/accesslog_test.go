package xds_test

import (
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	otelv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/open_telemetry/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// Access logs: the sink, the format, and a filter that keeps exactly the
// status classes, the slow requests and the sample asked for.
func TestAccessLogs(t *testing.T) {
	m := featureModel(func(l *ir.Listener) {
		l.HTTP.AccessLogs = []ir.AccessLog{
			{Path: "/dev/stdout", Format: "%RESPONSE_CODE%\n", SamplePercent: 100},
			{Collector: "otel", StatusClasses: []string{"4xx", "5xx"}, MinDuration: 250 * time.Millisecond, SamplePercent: 5},
		}
	})
	m.Clusters = append(m.Clusters, cluster("otel"))
	m.Clusters[0], m.Clusters[1] = m.Clusters[1], m.Clusters[0] // sorted
	out := translate(t, m)
	if len(out.Failed) > 0 {
		t.Fatal(out.Failed)
	}
	logs := hcmOf(t, out.Groups["edge"].Listeners[0]).GetAccessLog()
	if len(logs) != 2 {
		t.Fatalf("access logs = %v", logs)
	}
	stdout := &streamv3.StdoutAccessLog{}
	if err := logs[0].GetTypedConfig().UnmarshalTo(stdout); err != nil {
		t.Fatal(err)
	}
	if got := stdout.GetLogFormat().GetTextFormatSource().GetInlineString(); got != "%RESPONSE_CODE%\n" || logs[0].GetFilter() != nil {
		t.Errorf("stdout log: format %q, filter %v", got, logs[0].GetFilter())
	}
	otel := &otelv3.OpenTelemetryAccessLogConfig{}
	if err := logs[1].GetTypedConfig().UnmarshalTo(otel); err != nil {
		t.Fatal(err)
	}
	if got := otel.GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != "otel" {
		t.Errorf("collector cluster = %q", got)
	}
	// and(or(and(>=400, <=499), and(>=500, <=599)), duration >= 250, sample 5%)
	and := logs[1].GetFilter().GetAndFilter().GetFilters()
	if len(and) != 3 {
		t.Fatalf("filter = %v", logs[1].GetFilter())
	}
	var bounds []uint32
	for _, class := range and[0].GetOrFilter().GetFilters() {
		for _, f := range class.GetAndFilter().GetFilters() {
			bounds = append(bounds, f.GetStatusCodeFilter().GetComparison().GetValue().GetDefaultValue())
		}
	}
	if want := []uint32{400, 499, 500, 599}; !equalU32(bounds, want) {
		t.Errorf("status bounds = %v, want %v", bounds, want)
	}
	if d := and[1].GetDurationFilter().GetComparison(); d.GetOp() != accesslogv3.ComparisonFilter_GE || d.GetValue().GetDefaultValue() != 250 {
		t.Errorf("duration filter = %v", d)
	}
	if s := and[2].GetRuntimeFilter().GetPercentSampled(); s.GetNumerator() != 50000 {
		t.Errorf("sample = %v, want 5%% in millionths", s)
	}
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Tracing: OpenTelemetry spans to the collector's cluster, the sampling
// share and the request-id handling on the connection manager; the
// collector must be served like an access log's.
func TestTracing(t *testing.T) {
	tracing := func(l *ir.Listener) {
		l.HTTP.Tracing = &ir.Tracing{Collector: "otel", ServiceName: "edge", SamplePercent: 10, PreserveRequestID: true}
	}
	m := featureModel(tracing)
	m.Clusters = []*ir.Cluster{cluster("otel"), cluster("web")}
	out := translate(t, m)
	if len(out.Failed) > 0 {
		t.Fatal(out.Failed)
	}
	hcm := hcmOf(t, out.Groups["edge"].Listeners[0])
	cfg := &tracev3.OpenTelemetryConfig{}
	if err := hcm.GetTracing().GetProvider().GetTypedConfig().UnmarshalTo(cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "otel" || cfg.GetServiceName() != "edge" ||
		hcm.GetTracing().GetRandomSampling().GetValue() != 10 || !hcm.GetPreserveExternalRequestId() {
		t.Errorf("tracing = %v, preserve request id %v", hcm.GetTracing(), hcm.GetPreserveExternalRequestId())
	}
	// A collector that is no cluster at all is refused before
	// translation (the model names clusters a group does not get).
	if _, err := xds.Translate(featureModel(tracing)); err == nil || !strings.Contains(err.Error(), `"otel"`) {
		t.Errorf("tracing to an unserved cluster: %v, want the model refused naming it", err)
	}
}

// A listener whose access log sends to a cluster its group does not get
// fails its group (the consistency check), rather than losing the logs.
func TestAccessLogCollectorMustBeServed(t *testing.T) {
	m := featureModel(func(l *ir.Listener) {
		l.HTTP.AccessLogs = []ir.AccessLog{{Collector: "otel", SamplePercent: 100}}
	})
	m.Clusters = append(m.Clusters, cluster("otel"))
	m.Groups[0].Clusters = []string{"web"} // not the collector
	_, err := xds.Translate(m)
	if err == nil || !strings.Contains(err.Error(), `"otel"`) {
		t.Errorf("Translate = %v, want the missing collector cluster refused", err)
	}
}
