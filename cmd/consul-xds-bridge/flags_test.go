package main

import (
	"bytes"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestParseAnywhere(t *testing.T) {
	for name, tc := range map[string]struct {
		args      []string
		wantRest  []string
		wantValue string
	}{
		"flags first":       {[]string{"-catalog", "c.json", "a.hcl", "b.hcl"}, []string{"a.hcl", "b.hcl"}, "c.json"},
		"flags after files": {[]string{"a.hcl", "b.hcl", "-catalog", "c.json"}, []string{"a.hcl", "b.hcl"}, "c.json"},
		"flags between":     {[]string{"a.hcl", "-catalog=c.json", "b.hcl"}, []string{"a.hcl", "b.hcl"}, "c.json"},
		"after --":          {[]string{"a.hcl", "--", "-catalog", "b.hcl"}, []string{"a.hcl", "-catalog", "b.hcl"}, ""},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		v := fs.String("catalog", "", "")
		rest, err := parseAnywhere(fs, tc.args)
		if err != nil || !slices.Equal(rest, tc.wantRest) || *v != tc.wantValue {
			t.Errorf("%s: rest %q, -catalog %q, err %v; want %q, %q", name, rest, *v, err, tc.wantRest, tc.wantValue)
		}
	}
}

// TestFlagsAfterFilesEverywhere: `validate f.hcl -catalog x.json` reads
// x.json as the catalog (it used to be parsed as HCL), and every
// subcommand's -h exits 0 with its flags.
func TestFlagsAfterFilesEverywhere(t *testing.T) {
	var out, errOut bytes.Buffer
	code := realMain([]string{"validate", "../../examples/policies/edge-gateway.hcl", "-catalog", "../../examples/policies/edge-gateway.catalog.json"}, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "1 file(s) valid") {
		t.Errorf("validate with the flag after the file: exit %d, %s%s", code, out.String(), errOut.String())
	}
	for _, sub := range []string{"run", "validate", "bootstrap", "agent", "test", "plan", "status", "import"} {
		out.Reset()
		errOut.Reset()
		if code := realMain([]string{sub, "-h"}, &out, &errOut); code != 0 || !strings.Contains(out.String()+errOut.String(), "-") {
			t.Errorf("%s -h: exit %d, output %q", sub, code, out.String()+errOut.String())
		}
	}
}
