package agent

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConnectLeafAccessConfig(t *testing.T) {
	base := "allow_groups = [\"web-edge\", \"edge-*\"]\nupstream {\n  addresses = [\"a:1\"]\n  max_message_size = \"8MiB\"\n}\n"
	c, diags := ParseConfig("agent.hcl", []byte(base+`connect {
  services = ["web", "api"]
  service "web" {
    proxy_groups = ["web-edge"]
    users        = ["0", "envoy-web"]
    unix_groups  = ["4242"]
  }
}
`))
	if diags.HasErrors() {
		t.Fatal(diagText(diags))
	}
	if c.MaxMessageSize != 8<<20 {
		t.Errorf("max_message_size %d", c.MaxMessageSize)
	}
	if w := c.Leaf["web"]; !slices.Equal(w.ProxyGroups, []string{"web-edge"}) || !slices.Equal(w.Users, []string{"0", "envoy-web"}) || !slices.Equal(w.UnixGroups, []string{"4242"}) {
		t.Errorf("web's access %+v", w)
	}
	if _, ok := c.Leaf["api"]; ok {
		t.Error("api has an access block it was not given")
	}
	// Without the settings: the old config stays valid, with the relay
	// limit of the central bridge.
	c, diags = ParseConfig("agent.hcl", []byte("allow_groups = [\"*\"]\nupstream {\n  addresses = [\"a:1\"]\n}\nconnect {\n  services = [\"web\"]\n}\n"))
	if diags.HasErrors() || c.MaxMessageSize != 64<<20 || len(c.Leaf) != 0 {
		t.Fatalf("defaults: %+v %s", c, diagText(diags))
	}

	for src, want := range map[string]string{
		`service "web" {` + "\n" + `proxy_groups = ["edge-*"]` + "\n}":      "a pattern would let any matching group",
		`service "web" {` + "\n" + `proxy_groups = ["sidecar:n/x"]` + "\n}": "sidecar groups are known from their Consul registration",
		`service "web" {` + "\n" + `proxy_groups = ["db"]` + "\n}":          "no local proxy may claim it",
		`service "db" {` + "\n}":                                `service "db" is not in connect.services`,
		`service "web" {` + "\n}\n" + `service "web" {` + "\n}": "previous definition at agent.hcl:",
	} {
		_, diags := ParseConfig("agent.hcl", []byte(base+"connect {\n  services = [\"web\"]\n"+src+"\n}\n"))
		if got := diagText(diags); !strings.Contains(got, want) || !strings.Contains(got, "agent.hcl:") {
			t.Errorf("%q: diagnostics %q, want %q with a position", src, got, want)
		}
	}
	for size, want := range map[string]string{`"100MiB"`: "between 1MiB and 64MiB", `"512KiB"`: "between 1MiB and 64MiB", `"lots"`: "is not a size"} {
		_, diags := ParseConfig("agent.hcl", []byte("allow_groups = [\"*\"]\nupstream {\n  addresses = [\"a:1\"]\n  max_message_size = "+size+"\n}\n"))
		if got := diagText(diags); !strings.Contains(got, want) {
			t.Errorf("max_message_size %s: %q, want %q", size, got, want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"1048576": 1 << 20, "64MiB": 64 << 20, "8 MiB": 8 << 20, "2MB": 2e6, "1GiB": 1 << 30, "512KiB": 512 << 10} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1MiB", "1.5MiB", "9GiB"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}

func TestResolvePeers(t *testing.T) {
	c := &Config{ConnectServices: []string{"web", "api"}, SocketGroup: "4242",
		Leaf: map[string]LeafAccess{"web": {Users: []string{"1001", "root"}, UnixGroups: []string{"77"}}}}
	p, err := c.resolvePeers()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p["web"].uids, []uint32{1001, 0}) || !slices.Equal(p["web"].gids, []uint32{77}) {
		t.Errorf("web: %+v", p["web"])
	}
	// api has no users: root, the agent's user and the socket's group.
	if !slices.Contains(p["api"].uids, 0) || !slices.Equal(p["api"].gids, []uint32{4242}) {
		t.Errorf("api: %+v", p["api"])
	}
	c.Leaf["web"] = LeafAccess{Users: []string{"no-such-user-xyz"}}
	if _, err := c.resolvePeers(); err == nil || !strings.Contains(err.Error(), `connect service "web" users`) {
		t.Errorf("an unknown user: %v", err)
	}
}

// TestBackoff: waits are jittered within the upper half of a step that
// doubles to the cap, and start over after a reset.
func TestBackoff(t *testing.T) {
	b := newBackoff(100*time.Millisecond, time.Second)
	step := 100 * time.Millisecond
	seen := map[time.Duration]bool{}
	for range 20 {
		d := b.next()
		if d < step/2 || d > step {
			t.Fatalf("wait %v outside [%v, %v]", d, step/2, step)
		}
		seen[d] = true
		step = min(2*step, time.Second)
	}
	if len(seen) < 10 {
		t.Errorf("waits not jittered: %v", seen)
	}
	b.reset()
	if d := b.next(); d > 100*time.Millisecond {
		t.Errorf("after reset: %v", d)
	}
}
