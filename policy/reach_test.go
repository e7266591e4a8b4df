package policy

import (
	"slices"
	"strings"
	"testing"
)

const edgeProxy = `
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        service = "web"
      }
    }
  }
}
`

// TestUnmatchedNodes: the default follows whether the policy declares
// proxy groups; an explicit value wins, must be one of two, and agree
// across documents.
func TestUnmatchedNodes(t *testing.T) {
	for name, tc := range map[string]struct {
		docs []string
		want string // or the error's summary
	}{
		"no policy at all":        {[]string{`service "web" {}`}, UnmatchedAll},
		"a proxy block":           {[]string{edgeProxy}, UnmatchedNone},
		"only a proxyless group":  {[]string{`proxy "g" { proxyless = true }`}, UnmatchedNone},
		"explicit all with proxy": {[]string{`unmatched_nodes = "all"` + edgeProxy}, UnmatchedAll},
		"explicit none":           {[]string{`unmatched_nodes = "none"`}, UnmatchedNone},
		"in another document":     {[]string{edgeProxy, `unmatched_nodes = "all"`}, UnmatchedAll},
		"invalid":                 {[]string{`unmatched_nodes = "some"`}, "Invalid unmatched_nodes"},
		"conflict":                {[]string{`unmatched_nodes = "all"`, `unmatched_nodes = "none"`}, "Conflicting unmatched_nodes"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, diags := loadDocs(false, tc.docs...)
			if diags.HasErrors() {
				if !strings.Contains(diags.Error(), tc.want) {
					t.Fatalf("diagnostics %v, want %q", diags, tc.want)
				}
				return
			}
			if got := cfg.Policy.UnmatchedNodes; got != tc.want {
				t.Fatalf("UnmatchedNodes = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestProxyUpstreams: upstreams are sorted, make a group without
// listeners valid, and are checked; export_all_services is per group.
func TestProxyUpstreams(t *testing.T) {
	cfg, diags := loadDocs(false, `
proxy "batch" {
  upstreams = ["jobs", "audit"]
}
proxy "edge" {
  export_all_services = true
}
`)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	batch, edge := cfg.Policy.ProxyFor("batch"), cfg.Policy.ProxyFor("edge")
	if !slices.Equal(batch.Upstreams, []string{"audit", "jobs"}) || batch.ExportAllServices {
		t.Errorf("batch = %+v", batch)
	}
	if !edge.ExportAllServices {
		t.Errorf("edge = %+v, want export_all_services", edge)
	}
	for src, want := range map[string]string{
		`proxy "p" {}`:                         "Proxy without listeners",
		`proxy "p" { upstreams = ["a", "a"] }`: "Duplicate upstream",
		`proxy "p" { upstreams = ["a/b"] }`:    "Invalid upstream",
		`proxy "p" { upstreams = [""] }`:       "Invalid upstream",
	} {
		_, diags := loadDocs(false, src)
		if !strings.Contains(diags.Error(), want) {
			t.Errorf("%s: diagnostics %v, want %q", src, diags, want)
		}
	}
}
