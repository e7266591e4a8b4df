package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/routetest"
)

// testCmd runs the route_test blocks of the given files against the routes
// the translator generates from the same files' policy. Exit 0: every test
// passed; 1: a test failed or the files are invalid; 2: usage.
func testCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("test", stderr)
	catalogFile := fs.String("catalog", "", "catalog fixture (Consul API JSON) for expectations on endpoints")
	run := fs.String("run", "", "run only the tests whose name matches this regular expression")
	// Flags may come before, between or after the files.
	files, code, ok := parseCommand(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(files) == 0 {
		fmt.Fprintln(stderr, "test: name the policy files and the files with route_test blocks")
		return 2
	}
	// A directory is its *.hcl files, as for validate and run -config:
	// the policy is tested as it is served.
	files, err := expandConfigs(files)
	if err != nil {
		fmt.Fprintf(stderr, "test: %v\n", err)
		return 2
	}
	var filter *regexp.Regexp
	if *run != "" {
		if filter, err = regexp.Compile(*run); err != nil {
			fmt.Fprintf(stderr, "test: -run: %v\n", err)
			return 2
		}
	}
	suite, diags := routetest.Load(files...)
	if diags.HasErrors() {
		printDiagnostics(stderr, diags)
		return 1
	}
	cat, err := readCatalogFile(*catalogFile)
	if err != nil {
		fmt.Fprintf(stderr, "test: %v\n", err)
		return 1
	}
	tests := suite.Tests
	if filter != nil {
		tests = tests[:0:0]
		for _, t := range suite.Tests {
			if filter.MatchString(t.Name) {
				tests = append(tests, t)
			}
		}
	}
	if len(tests) == 0 {
		what := "no route_test blocks in " + strings.Join(files, ", ")
		if filter != nil {
			what = fmt.Sprintf("no route test matches -run %q", *run)
		}
		fmt.Fprintf(stderr, "test: %s\n", what)
		return 1
	}
	results, diags := routetest.Run(suite.Config.Policy, cat, tests)
	if len(diags) > 0 {
		printDiagnostics(stderr, diags)
	}
	if diags.HasErrors() {
		return 1
	}
	if routetest.Report(stdout, results) > 0 {
		return 1
	}
	return 0
}

// maxCatalogFile bounds a -catalog fixture: a dump of a large catalog
// (thousands of services) is tens of MiB, as big as a state file may be.
const maxCatalogFile = 64 << 20

// readCatalogFile reads a catalog fixture (Consul API JSON); nil for "".
// It is read as the bridge reads its own files (a FIFO or a device is
// refused, not waited on; the size is bounded).
func readCatalogFile(path string) (*consul.Catalog, error) {
	if path == "" {
		return nil, nil
	}
	src, err := policy.ReadBoundedFile(context.Background(), path, maxCatalogFile)
	if err != nil {
		return nil, fmt.Errorf("-catalog: %w", err)
	}
	cat, err := consul.ReadFixture(bytes.NewReader(src))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cat, nil
}
