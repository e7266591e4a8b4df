package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportThenValidate: `import` of config entries (files as `consul
// config read` writes them) prints HCL that `validate` accepts, with the
// dropped settings as NOTE comments.
func TestImportThenValidate(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := realMain([]string{"import", "../../policy/configentry/testdata/shop/entries.json"}, &out, &errOut); code != 0 {
		t.Fatalf("import exited %d: %s", code, errOut.String())
	}
	for _, want := range []string{`service "api" {`, `proxy "edge" {`, `grpc_service "echo" {`, "# NOTE service-resolver/api: subset \"odd\""} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("import output lacks %q:\n%s", want, out.String())
		}
	}
	file := filepath.Join(t.TempDir(), "imported.hcl")
	if err := os.WriteFile(file, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	if code := realMain([]string{"validate", file}, &bytes.Buffer{}, &errOut); code != 0 {
		t.Fatalf("validate rejects the imported policy (%d): %s", code, errOut.String())
	}
	// -mesh adds the routers' and splitters' mesh_routes, which validate
	// accepts next to a mesh block.
	var meshOut bytes.Buffer
	if code := realMain([]string{"import", "-mesh", "../../policy/configentry/testdata/shop/entries.json"}, &meshOut, &errOut); code != 0 || !strings.Contains(meshOut.String(), `mesh_routes "api" {`) || strings.Contains(out.String(), "mesh_routes") {
		t.Fatalf("import -mesh exited %d, mesh_routes with -mesh %v, without %v", code, strings.Contains(meshOut.String(), "mesh_routes"), strings.Contains(out.String(), "mesh_routes"))
	}
	if err := os.WriteFile(file, append(meshOut.Bytes(), "\nmesh {}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := realMain([]string{"validate", file}, &bytes.Buffer{}, &errOut); code != 0 {
		t.Fatalf("validate rejects the imported mesh policy (%d): %s", code, errOut.String())
	}
	if code := realMain([]string{"import", filepath.Join(t.TempDir(), "missing.json")}, &bytes.Buffer{}, &errOut); code != 1 || !strings.Contains(errOut.String(), "missing.json") {
		t.Fatalf("a missing file: exit %d, %s", code, errOut.String())
	}
}

// TestRouteTestsSeeTagRoutes: `test` evaluates the routes services declare
// in their tags (Traefik's here, with a strip-prefix middleware).
func TestRouteTestsSeeTagRoutes(t *testing.T) {
	var out, errOut bytes.Buffer
	dir := filepath.Join("testdata", "tagroutes")
	code := realMain([]string{"test", "-catalog", filepath.Join(dir, "catalog.json"), filepath.Join(dir, "policy.hcl"), filepath.Join(dir, "routes.test.hcl")}, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "2 passed, 0 failed") {
		t.Fatalf("exit %d:\n%s%s", code, out.String(), errOut.String())
	}
}

// TestImportSkipsKindsItDoesNotTranslate: a list of entries as a whole
// Consul holds them, with service-intentions and proxy-defaults next to a
// resolver, imports the resolver and names the others in NOTE lines
// rather than aborting (issue 39, item 5).
func TestImportSkipsKindsItDoesNotTranslate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "all.json")
	entries := `[
  {"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}},
  {"Kind": "service-intentions", "Name": "api", "Sources": [{"Name": "web", "Action": "allow"}]},
  {"Kind": "service-resolver", "Name": "api", "ConnectTimeout": "3s"}
]`
	if err := os.WriteFile(file, []byte(entries), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := realMain([]string{"import", file}, &out, &errOut); code != 0 {
		t.Fatalf("import exited %d: %s", code, errOut.String())
	}
	for _, want := range []string{`service "api" {`, `connect_timeout = "3s"`, `# NOTE ` + file + `: proxy-defaults "global"`, `# NOTE ` + file + `: service-intentions "api"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("import output lacks %q:\n%s", want, out.String())
		}
	}
}
