package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

func TestSettingsDefaultsAndOverrides(t *testing.T) {
	doc, diags := Parse("a.hcl", []byte(`
consul {
  address   = "10.0.0.5:8500"
  stale     = false
  wait_time = "30s"
}
log { level = "debug" }
`))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	cfg, diags := Merge(doc)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	s := cfg.Settings
	if s.Consul.Address != "10.0.0.5:8500" || s.Consul.Stale || s.Consul.WaitTime != 30*time.Second {
		t.Fatalf("consul settings not applied: %+v", s.Consul)
	}
	if s.Log.Level != "debug" || s.Log.Format != "json" {
		t.Fatalf("log settings: %+v", s.Log)
	}
	if s.XDS.MaxInitialSyncs != DefaultMaxInitialSyncs || s.Consul.MaxQueries != DefaultMaxQueries || s.XDS.DebounceHoldOff != DefaultDebounceHoldOff || s.XDS.DebounceMaxDelay != DefaultDebounceMax {
		t.Fatalf("scaling defaults lost: %+v %+v", s.XDS, s.Consul)
	}
	if s.XDS.Listen != DefaultXDSListen || s.Admin.Listen != DefaultAdminListen {
		t.Fatalf("defaults lost: %+v %+v", s.XDS, s.Admin)
	}
	if !s.XDS.CollectWhenIdle || !s.XDS.DebounceAdaptive {
		t.Fatalf("collect_when_idle and debounce_adaptive default to true: %+v", s.XDS)
	}
	doc, diags = Parse("b.hcl", []byte("xds {\n  collect_when_idle = false\n}\n"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if cfg, diags = Merge(doc); diags.HasErrors() || cfg.Settings.XDS.CollectWhenIdle {
		t.Fatalf("collect_when_idle = false not applied: %v %+v", diags, cfg.Settings.XDS)
	}
}

// TestReconnectHoldSetting: reconnect_hold defaults to 15 s and
// reconnect_hold_after to 2 s (docs/reference/daemon-settings.md); "0s"
// turns the hold off, as the docs say, and an hour is an hour.
func TestReconnectHoldSetting(t *testing.T) {
	for _, tc := range []struct {
		src         string
		hold, after time.Duration
	}{
		{"", 15 * time.Second, 2 * time.Second},
		{`consul { reconnect_hold = "0s" }`, 0, 2 * time.Second},
		{`consul {
  reconnect_hold = "1h"
  reconnect_hold_after = "500ms"
}`, time.Hour, 500 * time.Millisecond},
	} {
		doc, diags := Parse("a.hcl", []byte(tc.src+"\n"))
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		cfg, diags := Merge(doc)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		if c := cfg.Settings.Consul; c.ReconnectHold != tc.hold || c.ReconnectHoldAfter != tc.after {
			t.Errorf("%q: reconnect_hold %v, reconnect_hold_after %v; want %v, %v", tc.src, c.ReconnectHold, c.ReconnectHoldAfter, tc.hold, tc.after)
		}
	}
}

func TestSettingsDiagnostics(t *testing.T) {
	tests := map[string]struct {
		files map[string]string
		want  string // "file:line:col: summary"
	}{
		"bad duration": {
			files: map[string]string{"a.hcl": "consul {\n  wait_time = \"soon\"\n}\n"},
			want:  `a.hcl:2:15: Invalid duration`,
		},
		"wait time above consul's cap": {
			files: map[string]string{"a.hcl": "consul {\n  wait_time = \"11m\"\n}\n"},
			want:  `a.hcl:2:15: Invalid wait_time`,
		},
		"max_queries too high": {
			files: map[string]string{"a.hcl": "consul {\n  max_queries = 5000\n}\n"},
			want:  `a.hcl:2:17: Invalid max_queries`,
		},
		"negative max_initial_syncs": {
			files: map[string]string{"a.hcl": "xds {\n  max_initial_syncs = -1\n}\n"},
			want:  `a.hcl:2:23: Invalid max_initial_syncs`,
		},
		"debounce max below hold-off": {
			files: map[string]string{"a.hcl": "xds {\n  debounce_hold_off = \"2s\"\n}\n"},
			want:  `a.hcl:1:1: debounce_max_delay shorter than debounce_hold_off`,
		},
		"unknown attribute": {
			files: map[string]string{"a.hcl": "consul {\n  adress = \"x\"\n}\n"},
			want:  `a.hcl:2:3: Unsupported argument`,
		},
		"bad listen": {
			files: map[string]string{"a.hcl": "xds {\n  listen = \"18000\"\n}\n"},
			want:  `a.hcl:2:12: Invalid listen address`,
		},
		"bad log format": {
			files: map[string]string{"a.hcl": "\nlog { format = \"xml\" }\n"},
			want:  `a.hcl:2:16: Invalid log format`,
		},
		"duplicate block across files": {
			files: map[string]string{"a.hcl": "admin {}\n", "b.hcl": "\n\nadmin {}\n"},
			want:  `b.hcl:3:1: Duplicate admin block`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var docs []*Document
			var diags hcl.Diagnostics
			for _, fn := range []string{"a.hcl", "b.hcl"} {
				src, ok := tc.files[fn]
				if !ok {
					continue
				}
				d, ds := Parse(fn, []byte(src))
				diags = append(diags, ds...)
				if d != nil {
					docs = append(docs, d)
				}
			}
			if !diags.HasErrors() {
				_, ds := Merge(docs...)
				diags = append(diags, ds...)
			}
			var got []string
			for _, d := range diags {
				got = append(got, fmt.Sprintf("%s:%d:%d: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, d.Summary))
			}
			if len(got) == 0 || got[0] != tc.want {
				t.Fatalf("diagnostics = %q, want first %q", got, tc.want)
			}
			if name == "duplicate block across files" && !strings.Contains(diags[0].Detail, "a.hcl:1:1") {
				t.Fatalf("duplicate does not name the previous definition: %s", diags[0].Detail)
			}
		})
	}
}

// TestAdminHostsAndTokenPath: admin.hosts is read as written; the token
// is admin.token_file if set, else admin-token in consul.state_dir.
func TestAdminHostsAndTokenPath(t *testing.T) {
	doc, diags := Parse("a.hcl", []byte("consul {\n  state_dir = \"/var/lib/b\"\n}\nadmin {\n  hosts = [\"bridge.internal\"]\n}\n"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	cfg, diags := Merge(doc)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if got := cfg.Settings.Admin.Hosts; len(got) != 1 || got[0] != "bridge.internal" {
		t.Errorf("hosts = %v", got)
	}
	if p, gen, err := cfg.Settings.AdminTokenPath(); err != nil || p != "/var/lib/b/admin-token" || !gen {
		t.Errorf("AdminTokenPath = %q, %v, %v; want the state dir's, generated", p, gen, err)
	}
	cfg.Settings.Admin.TokenFile = "/etc/b/admin-token"
	if p, gen, _ := cfg.Settings.AdminTokenPath(); p != "/etc/b/admin-token" || gen {
		t.Errorf("AdminTokenPath with token_file = %q, %v; want it, not generated", p, gen)
	}
}
