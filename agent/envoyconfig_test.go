package agent

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

const envoyBase = `node_id = "vm-1"
allow_groups = ["web", "edge"]
upstream {
  addresses = ["bridge:18000"]
}
connect {
  services = ["api"]
}
`

func TestEnvoyBlockDefaults(t *testing.T) {
	c, diags := ParseConfig("agent.hcl", []byte(envoyBase+`
envoy "edge" {
  cluster = "edge"
  args    = ["-l", "debug"]
}
envoy "api" {
  sidecar_for = "api"
  binary      = "/opt/envoy/bin/envoy"
  admin_port  = 19001
  concurrency = 2
  drain_time  = "5s"
  drain_strategy = "gradual"
}
`))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	want := []EnvoyConfig{
		{Name: "edge", Binary: DefaultEnvoyBinary, NodeID: "vm-1-edge", Cluster: "edge", AdminPort: 19000, BaseID: 19000,
			DrainTime: 30 * time.Second, ParentShutdownTime: 45 * time.Second, DrainStrategy: "immediate", Args: []string{"-l", "debug"}},
		{Name: "api", Binary: "/opt/envoy/bin/envoy", NodeID: "api-sidecar-proxy", Cluster: "api", SidecarFor: "api", AdminPort: 19001, BaseID: 19001,
			Concurrency: 2, DrainTime: 5 * time.Second, ParentShutdownTime: 20 * time.Second, DrainStrategy: "gradual"},
	}
	if len(c.Envoys) != 2 {
		t.Fatalf("envoys %+v", c.Envoys)
	}
	for i := range want {
		if g, w := c.Envoys[i], want[i]; !equalEnvoy(g, w) {
			t.Errorf("envoy %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	args := envoyArgs(c.Envoys[1], "/b.yaml", 3)
	wantArgs := []string{"-c", "/b.yaml", "--restart-epoch", "3", "--base-id", "19001", "--drain-time-s", "5", "--parent-shutdown-time-s", "20",
		"--drain-strategy", "gradual", "--socket-path", "/b.hr", "--socket-mode", "600", "--concurrency", "2"}
	if !slices.Equal(args, wantArgs) {
		t.Errorf("args %q, want %q", args, wantArgs)
	}
}

func equalEnvoy(a, b EnvoyConfig) bool {
	eq := slices.Equal(a.Args, b.Args)
	a.Args, b.Args = nil, nil
	return eq && a.Name == b.Name && a.Binary == b.Binary && a.NodeID == b.NodeID && a.Cluster == b.Cluster && a.SidecarFor == b.SidecarFor &&
		a.AdminPort == b.AdminPort && a.BaseID == b.BaseID && a.Concurrency == b.Concurrency && a.DrainTime == b.DrainTime &&
		a.ParentShutdownTime == b.ParentShutdownTime && a.DrainStrategy == b.DrainStrategy
}

// TestEnvoyBlockErrors: what would let the admin port off loopback, break
// hot restart or make the agent refuse its own Envoy is refused at its
// block's position.
func TestEnvoyBlockErrors(t *testing.T) {
	for name, tc := range map[string]struct{ block, want string }{
		"both roles":        {`cluster = "web"` + "\n" + `sidecar_for = "api"`, "Envoy needs exactly one role"},
		"no role":           {``, "Envoy needs exactly one role"},
		"group not allowed": {`cluster = "payments"`, `cluster = "payments" is not matched by allow_groups`},
		"sidecar unknown":   {`sidecar_for = "web"`, `sidecar_for = "web" needs "web" in connect.services`},
		"config-yaml":       {`cluster = "web"` + "\n" + `args = ["--config-yaml", "admin: {address: {socket_address: {address: 0.0.0.0}}}"]`, "args may not set --config-yaml"},
		"restart epoch":     {`cluster = "web"` + "\n" + `args = ["--restart-epoch=4"]`, "args may not set --restart-epoch"},
		// Envoy splits one argument at its first space (TCLAP): these
		// set the flag as surely as two arguments do.
		"config-yaml in one argument": {`cluster = "web"` + "\n" + `args = ["--config-yaml admin: {address: {socket_address: {address: 0.0.0.0, port_value: 9901}}}"]`, "args may not set --config-yaml"},
		"base-id in one argument":     {`cluster = "web"` + "\n" + `args = ["--base-id 7"]`, "args may not set --base-id"},
		"socket-path in one argument": {`cluster = "web"` + "\n" + `args = ["--socket-path /tmp/x"]`, "args may not set --socket-path"},
		"relative binary":             {`cluster = "web"` + "\n" + `binary = "envoy"`, "must be an absolute path"},
		"fractional drain":            {`cluster = "web"` + "\n" + `drain_time = "1500ms"`, "whole seconds"},
		"parent before":               {`cluster = "web"` + "\n" + `drain_time = "30s"` + "\n" + `parent_shutdown_time = "30s"`, "must be longer than drain_time"},
		"agent's admin port":          {`cluster = "web"` + "\n" + `admin_port = 19101`, "the agent's own admin listener"},
		"bad port":                    {`cluster = "web"` + "\n" + `admin_port = 70000`, "Invalid admin_port"},
		"drain strategy":              {`cluster = "web"` + "\n" + `drain_strategy = "slow"`, "Invalid drain_strategy"},
		"node id":                     {`cluster = "web"` + "\n" + `node_id = "x y"`, ""},
	} {
		t.Run(name, func(t *testing.T) {
			src := envoyBase + "allow_node_ids = [\"vm-*\", \"*-sidecar-proxy\"]\nenvoy \"e\" {\n" + tc.block + "\n}\n"
			_, diags := ParseConfig("agent.hcl", []byte(src))
			got := strings.Join(policy.FormatDiagnostics(diags), "\n")
			if tc.want == "" {
				if !strings.Contains(got, "node id is not allowed") {
					t.Fatalf("diags %q, want the node id refused", got)
				}
				return
			}
			if !strings.Contains(got, tc.want) || !strings.Contains(got, "agent.hcl:10:") {
				t.Fatalf("diags %q, want %q at the block (line 10)", got, tc.want)
			}
		})
	}
	_, diags := ParseConfig("agent.hcl", []byte(envoyBase+"envoy \"a\" {\n cluster = \"web\"\n}\nenvoy \"b\" {\n cluster = \"edge\"\n}\n"))
	if got := strings.Join(policy.FormatDiagnostics(diags), "\n"); !strings.Contains(got, "Duplicate admin_port") {
		t.Fatalf("two envoys on the default admin port: %q", got)
	}
}

// TestEnvoyHotRestartSocketFits: the hot restart socket lives in
// data_dir; a data_dir too long for a Unix socket path (107 bytes, and
// Envoy appends up to 18) is refused at parse, naming the path, rather
// than leaving Envoy unable to bind at its first start.
func TestEnvoyHotRestartSocketFits(t *testing.T) {
	long := "/var/lib/" + strings.Repeat("d", 80)
	_, diags := ParseConfig("agent.hcl", []byte(envoyBase+"data_dir = \""+long+"\"\nenvoy \"web\" {\n  cluster = \"web\"\n}\n"))
	if !diags.HasErrors() || !strings.Contains(diags.Error(), "data_dir too long for Envoy's hot restart socket") || !strings.Contains(diags.Error(), long+"/envoy/web.hr") {
		t.Errorf("diags %q, want the socket path refused", diags.Error())
	}
	if _, diags := ParseConfig("agent.hcl", []byte(envoyBase+"data_dir = \"/var/lib/consul-xds-bridge/agent\"\nenvoy \"web\" {\n  cluster = \"web\"\n}\n")); diags.HasErrors() {
		t.Errorf("the default data_dir: %v", diags)
	}
}
