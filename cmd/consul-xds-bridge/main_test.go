package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.hcl")
	bad := filepath.Join(dir, "bad.hcl")
	os.WriteFile(good, []byte("proxy \"edge\" {\n  listener \"http\" {\n    port = 8080\n    virtual_host \"a\" {\n      route {\n        service = \"web\"\n      }\n    }\n  }\n}\n"), 0o644)
	untranslatable := filepath.Join(dir, "untranslatable.hcl")
	os.WriteFile(untranslatable, []byte("proxy \"edge\" {\n  listener \"http\" {\n    port = 8080\n    virtual_host \"a\" {\n      route {\n        service = \"web\"\n        request_headers {\n          set = { \"x-a\" = \"a\\nb\" }\n        }\n      }\n    }\n  }\n}\n"), 0o644)
	os.WriteFile(bad, []byte("service \"api\" {\n  lb_polcy = \"random\"\n  connect_timeout = \"soon\"\n}\n"), 0o644)

	tests := map[string]struct {
		args     []string
		wantCode int
		wantOut  []string
	}{
		"valid file": {args: []string{"validate", good}, wantCode: 0, wantOut: []string{"1 file(s) valid"}},
		"invalid file prints positions": {
			args:     []string{"validate", bad},
			wantCode: 1,
			wantOut:  []string{bad + `:2:3: Unsupported argument: An argument named "lb_polcy" is not expected here. Did you mean "lb_policy"?`},
		},
		// Valid HCL that Envoy would refuse: validate translates it too, as
		// a reload does, and points at the route.
		"untranslatable policy": {
			args:     []string{"validate", untranslatable},
			wantCode: 1,
			wantOut:  []string{untranslatable + `:5:7: Proxy group "edge" cannot be translated to Envoy resources`},
		},
		"with a catalog fixture": {
			args:     []string{"validate", "-catalog", "../../examples/policies/edge-gateway.catalog.json", "../../examples/policies/edge-gateway.hcl"},
			wantCode: 0,
			wantOut:  []string{"1 file(s) valid"},
		},
		"missing file": {args: []string{"validate", filepath.Join(dir, "nope.hcl")}, wantCode: 1, wantOut: []string{"nope.hcl: Cannot read configuration file"}},
		"no files":     {args: []string{"validate"}, wantCode: 2, wantOut: []string{"name at least one"}},
		"version":      {args: []string{"version"}, wantCode: 0, wantOut: []string{"consul-xds-bridge", "go-control-plane: v0.14.0"}},
		"unknown":      {args: []string{"frobnicate"}, wantCode: 2, wantOut: []string{`unknown command "frobnicate"`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			code := realMain(tc.args, &out, &out)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d; output:\n%s", code, tc.wantCode, out.String())
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// Log times carry milliseconds: a change's events (Consul's answer, the
// build, the push) fall within one second.
func TestLogTimesHaveMilliseconds(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(policy.LogSettings{Level: "info", Format: "json"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Msg("x")
	var line struct{ Time string }
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)$`).MatchString(line.Time) {
		t.Fatalf("log time %q, want RFC 3339 with milliseconds", line.Time)
	}
}
