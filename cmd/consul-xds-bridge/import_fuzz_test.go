package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzImportEntries: a file of any bytes handed to `import` (config
// entries as `consul config read` prints them, one or a JSON list) is
// translated or refused with exit 1, never a panic: decoding, the
// entries' checks and their translation to HCL all run.
func FuzzImportEntries(f *testing.F) {
	for _, s := range []string{
		`{"Kind": "service-resolver", "Name": "api", "ConnectTimeout": "3s", "Subsets": {"v2": {"Filter": "\"v2\" in Service.Tags"}}}`,
		`[{"Kind": "service-defaults", "Name": "api", "Protocol": "http"}, {"Kind": "service-splitter", "Name": "api", "Splits": [{"Weight": 90}, {"Weight": 10, "ServiceSubset": "v2"}]}]`,
		`{"Kind": "service-router", "Name": "api", "Routes": [{"Match": {"HTTP": {"PathPrefix": "/v2/", "Header": [{"Name": "x", "Regex": "a+"}]}}, "Destination": {"ServiceSubset": "v2", "RequestTimeout": "2s", "NumRetries": 2, "RetryOn": ["5xx"]}}]}`,
		`{"Kind": "ingress-gateway", "Name": "edge", "TLS": {"Enabled": true}, "Listeners": [{"Port": 8080, "Protocol": "http", "Services": [{"Name": "api", "Hosts": ["api.example.com"]}]}]}`,
		`{"Kind": "api-gateway", "Name": "gw", "Listeners": [{"Name": "http", "Port": 8080, "Protocol": "http", "Hostname": "*.example.com"}]}`,
		`[]`, `{}`, `[{"Kind": 1}]`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, src []byte) {
		file := filepath.Join(dir, "entries.json")
		if err := os.WriteFile(file, src, 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if code := realMain([]string{"import", file}, &out, &errOut); code != 0 && code != 1 {
			t.Fatalf("exit %d for %q:\n%s", code, src, errOut.String())
		}
	})
}
