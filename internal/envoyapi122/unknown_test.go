package envoyapi122

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestOldestEnvoyKnowsEverything decodes every resource the bridge
// serves a node claiming Envoy 1.22, for every golden case (written by
// the bridge's TestEnvoy122Fixtures), with Envoy 1.22's API and fails on
// anything that API does not know.
func TestOldestEnvoyKnowsEverything(t *testing.T) {
	files, err := filepath.Glob("testdata/served/*.pb")
	if err != nil || len(files) < 10 {
		t.Fatalf("expected the served fixtures of every golden case in testdata/served, found %d (%v)", len(files), err)
	}
	total, resources := 0, 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		resp := &discoveryv3.DeltaDiscoveryResponse{}
		if err := proto.Unmarshal(b, resp); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, r := range resp.GetResources() {
			resources++
			for _, p := range Problems(r.GetResource().ProtoReflect(), r.GetName()) {
				total++
				t.Errorf("%s: %s", filepath.Base(f), p)
			}
		}
	}
	if resources == 0 {
		t.Fatal("the fixtures hold no resources")
	}
	t.Logf("%d resources in %d cases, %d problems", resources, len(files), total)
}

// TestProblemsFindsWhatTheOldAPILacks: the check itself sees each kind of
// problem, so a pass above means something.
func TestProblemsFindsWhatTheOldAPILacks(t *testing.T) {
	unknownField := &discoveryv3.Resource{Name: "x"}
	// Field 99 of Resource: no API has it.
	unknownField.ProtoReflect().SetUnknown([]byte{0x98, 0x06, 0x01})
	known := &discoveryv3.Resource{Name: "x"}
	newType := &anypb.Any{TypeUrl: "type.googleapis.com/envoy.extensions.tracers.opentelemetry.v3.Nothing"}
	nested, _ := anypb.New(unknownField)
	fine, _ := anypb.New(structpb.NewStringValue("ok"))
	for name, tc := range map[string]struct {
		msg  proto.Message
		want string
	}{
		"unknown field":        {unknownField, "unknown field(s) [99]"},
		"unknown type":         {newType, "is not in the API"},
		"unknown field in Any": {&discoveryv3.Resource{Resource: nested}, "unknown field(s) [99]"},
		"nothing":              {known, ""},
		"known Any":            {&discoveryv3.Resource{Resource: fine}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			got := strings.Join(Problems(tc.msg.ProtoReflect(), "r"), "\n")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("Problems = %q, want one containing %q", got, tc.want)
			}
		})
	}
}
