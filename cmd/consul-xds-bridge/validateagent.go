package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// isAgentConfig recognises a per-VM agent's configuration by what only it
// has at the top level (allow_groups, the upstream block), so `validate
// agent.hcl` checks it as `agent -config` would read it.
func isAgentConfig(name string) bool {
	src, err := readSettingFile(name)
	if err != nil {
		return false
	}
	if policy.CheckNesting(name, src).HasErrors() {
		return false // hcl's parser would overflow the stack on it
	}
	f, diags := hclsyntax.ParseConfig(src, name, hcl.InitialPos)
	if diags.HasErrors() {
		return false
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return false
	}
	if _, ok := body.Attributes["allow_groups"]; ok {
		return true
	}
	for _, b := range body.Blocks {
		if b.Type == "upstream" {
			return true
		}
	}
	return false
}

// validateAgent checks an agent configuration as `agent -config` reads
// it, and the files and directories it names as the agent uses them at
// start.
func validateAgent(name string) hcl.Diagnostics {
	src, err := readSettingFile(name)
	if err != nil {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Cannot read the agent configuration", Detail: fmt.Sprintf("%s: %v", name, err)}}
	}
	cfg, diags := agent.ParseConfig(name, src)
	if diags.HasErrors() {
		return diags
	}
	files := []string{name}
	bad := func(path []string, summary, detail string) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: findSetting(files, path...)})
	}
	readable := func(path []string, file, what string) []byte {
		b, err := readSettingFile(file)
		if err != nil {
			bad(path, "Cannot read the "+what, fmt.Sprintf("%s = %q: %v; the agent refuses to start without it. Create the file or fix the path.", dotted(path), file, err))
		}
		return b
	}
	t := cfg.TLS
	if t.CAFile != "" {
		if ca := readable([]string{"upstream", "tls", "ca_file"}, t.CAFile, "CA of the central bridges"); ca != nil && !x509.NewCertPool().AppendCertsFromPEM(ca) {
			bad([]string{"upstream", "tls", "ca_file"}, "Invalid CA", fmt.Sprintf("upstream.tls.ca_file = %q holds no PEM certificate.", t.CAFile))
		}
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert := readable([]string{"upstream", "tls", "cert_file"}, t.CertFile, "agent's client certificate")
		key := readable([]string{"upstream", "tls", "key_file"}, t.KeyFile, "agent's client key")
		if cert != nil && key != nil {
			if _, err := tls.X509KeyPair(cert, key); err != nil {
				bad([]string{"upstream", "tls", "cert_file"}, "Invalid client certificate or key", fmt.Sprintf("upstream.tls cert_file %q and key_file %q: %v", t.CertFile, t.KeyFile, err))
			}
		}
	}
	for _, d := range []struct {
		attr, dir string
	}{{"data_dir", cfg.DataDir}, {"connect.cert_dir", cfg.CertDir}} {
		if d.dir == "" {
			continue
		}
		if err := writableDir(d.dir); err != nil {
			bad(strings.Split(d.attr, "."), "Directory not writable", fmt.Sprintf("%s = %q: %v; create it, writable by the agent's user.", d.attr, d.dir, err))
		}
	}
	for _, e := range cfg.Envoys {
		if err := executableFile(e.Binary); err != nil {
			rng := e.DeclRange
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Envoy binary not executable", Subject: &rng,
				Detail: fmt.Sprintf("envoy %q binary = %q: %v; the agent could not start this Envoy (it would retry with back-off). Install Envoy there or fix the path.", e.Name, e.Binary, err)})
		}
	}
	return diags
}

// executableFile checks that name is a regular file someone may execute.
func executableFile(name string) error {
	fi, err := os.Stat(name)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not an executable file (mode %s)", fi.Mode())
	}
	return nil
}
