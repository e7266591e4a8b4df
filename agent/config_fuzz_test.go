package agent

import "testing"

// FuzzParseConfig: an agent configuration of any bytes is parsed or
// refused with diagnostics, never a panic (the agent reads it at start
// and on every SIGHUP; validate reads it too).
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(envoyBase))
	f.Add([]byte(envoyBase + "envoy \"web\" {\n  cluster = \"web\"\n  args = [\"--concurrency 2\"]\n}\n"))
	f.Add([]byte("listen {\n  socket = \"/run/x.sock\"\n  socket_mode = \"0660\"\n}\nupstream {\n  consul_service = \"b\"\n  tls {\n    ca_file = \"/x\"\n  }\n}\n"))
	f.Add([]byte("connect {\n  services = [\"web\"]\n  service \"web\" {\n    users = [\"envoy\"]\n  }\n}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		cfg, diags := ParseConfig("agent.hcl", src)
		if !diags.HasErrors() && cfg == nil {
			t.Fatal("no config and no error")
		}
	})
}
