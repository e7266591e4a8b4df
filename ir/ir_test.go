package ir

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func sampleCluster() Cluster {
	return Cluster{
		Name: "api", Service: "api", Subset: "v1", ConnectTimeout: time.Second, LBPolicy: LBRingHash, HTTP2: true,
		CircuitBreaker:   &CircuitBreaker{MaxConnections: 1},
		OutlierDetection: &OutlierDetection{Consecutive5xx: 5},
		HealthCheck:      &HealthCheck{Path: "/h"},
		TLS:              &UpstreamTLS{SNI: "api"},
		ZoneAware:        &ZoneAware{MinClusterSize: 6, RoutingPercent: 100},
		Endpoints:        []Endpoint{{Address: netip.MustParseAddr("10.0.0.1"), Port: 80, Weight: 1}},
	}
}

// TestClusterEqualSeesEveryField: changing any field of a Cluster (or of
// what it points to) makes it unequal, so a field added later without
// Equal learning of it fails here rather than serving stale resources.
func TestClusterEqualSeesEveryField(t *testing.T) {
	a := sampleCluster()
	if b := sampleCluster(); !a.Equal(&b) {
		t.Fatal("equal clusters compare unequal")
	}
	typ := reflect.TypeOf(a)
	for i := range typ.NumField() {
		b := sampleCluster()
		f := reflect.ValueOf(&b).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Pointer:
			// A copy of the pointee with its first field changed.
			p := reflect.New(f.Elem().Type())
			p.Elem().Set(f.Elem())
			g := p.Elem().Field(0)
			switch g.Kind() {
			case reflect.String:
				g.SetString(g.String() + "x")
			default:
				g.SetUint(g.Uint() + 1)
			}
			f.Set(p)
		case reflect.Slice:
			if typ.Field(i).Name == "LBPolicies" {
				b.LBPolicies = append(slices.Clone(b.LBPolicies), LBLeastRequest)
				break
			}
			if typ.Field(i).Name == "Aggregate" {
				b.Aggregate = append(slices.Clone(b.Aggregate), FailoverTargetPrefix+"x")
				break
			}
			b.Endpoints = []Endpoint{{Address: netip.MustParseAddr("10.0.0.1"), Port: 80, Weight: 2}}
		default:
			t.Fatalf("field %s: kind %s not covered by this test", typ.Field(i).Name, f.Kind())
		}
		if a.Equal(&b) {
			t.Errorf("changing %s leaves the clusters equal", typ.Field(i).Name)
		}
		if endpoints := typ.Field(i).Name == "Endpoints"; a.SettingsEqual(&b) != endpoints {
			t.Errorf("changing %s: SettingsEqual = %v, want %v", typ.Field(i).Name, !endpoints, endpoints)
		}
	}
	b := sampleCluster()
	b.TLS = nil
	if a.Equal(&b) || b.Equal(&a) {
		t.Error("nil vs set TLS compares equal")
	}
}

// TestRedactedJSON: a key encodes as the marker, the marker decodes to no
// key, and anything else fails without the error quoting it.
func TestRedactedJSON(t *testing.T) {
	s := Secret{Name: "edge/cert", CertificateChain: []byte("CERT"), PrivateKey: Redacted("KEY MATERIAL")}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"Name":"edge/cert","CertificateChain":"Q0VSVA==","PrivateKey":"[redacted]","TrustedCA":null}`; string(b) != want {
		t.Fatalf("encoded %s, want %s", b, want)
	}
	var got Secret
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.PrivateKey != nil || got.Name != s.Name || string(got.CertificateChain) != "CERT" {
		t.Fatalf("decoded %+v (key %q), want the secret without its key", got, []byte(got.PrivateKey))
	}
	err = json.Unmarshal([]byte(`{"PrivateKey":"KEY MATERIAL"}`), &got)
	if !errors.Is(err, ErrRedacted) || strings.Contains(err.Error(), "KEY") {
		t.Fatalf("decoding a key: err = %v, want ErrRedacted without the key", err)
	}
}
