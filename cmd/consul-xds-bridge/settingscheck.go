package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"golang.org/x/sys/unix"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// maxSettingFile bounds what validate reads of a file a daemon setting
// names: tokens and PEM files are a few KiB, and a setting pointing at
// /dev/zero must not take validate down.
const maxSettingFile = 1 << 20

// checkSettingFiles refuses what `run` would refuse at start about the
// files and directories the daemon settings name: a token, TLS
// certificate, key or CA that does not exist, cannot be read, is not a
// regular file or does not parse, and a state directory the daemon cannot
// write. Each diagnostic points at the setting in its file.
func checkSettingFiles(files []string, s policy.Settings) hcl.Diagnostics {
	var diags hcl.Diagnostics
	bad := func(path []string, summary, detail string) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: findSetting(files, path...)})
	}
	// readableWithin reads a file a setting names as the daemon would,
	// within limit; readable within maxSettingFile.
	readableWithin := func(path []string, file, what string, limit int64) []byte {
		b, err := policy.ReadBoundedFile(context.Background(), file, limit)
		if err != nil {
			bad(path, fmt.Sprintf("Cannot read the %s", what), fmt.Sprintf("%s = %q: %v; the daemon refuses to start without it. Create the file or fix the path.", dotted(path), file, err))
		}
		return b
	}
	readable := func(path []string, file, what string) []byte {
		return readableWithin(path, file, what, maxSettingFile)
	}
	if f := s.Consul.TokenFile; f != "" {
		readable([]string{"consul", "token_file"}, f, "Consul ACL token file")
	}
	if f := s.Admin.TokenFile; f != "" {
		// The daemon reads it with the CLI's limit for a token (a line).
		if b := readableWithin([]string{"admin", "token_file"}, f, "admin token file", maxTokenFileBytes); b != nil && len(bytes.TrimSpace(b)) == 0 {
			bad([]string{"admin", "token_file"}, "Empty admin token file", fmt.Sprintf("admin.token_file = %q holds no token; the daemon refuses to start with it. Write a token into it.", f))
		}
	}
	if t := s.XDS.TLS; t.CertFile != "" && t.KeyFile != "" {
		cert := readable([]string{"xds", "tls", "cert_file"}, t.CertFile, "xDS server certificate")
		key := readable([]string{"xds", "tls", "key_file"}, t.KeyFile, "xDS server key")
		if cert != nil && key != nil {
			if _, err := tls.X509KeyPair(cert, key); err != nil {
				bad([]string{"xds", "tls", "cert_file"}, "Invalid xDS server certificate or key", fmt.Sprintf("xds.tls cert_file %q and key_file %q: %v", t.CertFile, t.KeyFile, err))
			}
		}
		if t.ClientCAFile != "" {
			if ca := readable([]string{"xds", "tls", "client_ca_file"}, t.ClientCAFile, "xDS client CA"); ca != nil && !x509.NewCertPool().AppendCertsFromPEM(ca) {
				bad([]string{"xds", "tls", "client_ca_file"}, "Invalid xDS client CA", fmt.Sprintf("xds.tls.client_ca_file = %q holds no PEM certificate.", t.ClientCAFile))
			}
		}
	}
	if dir := s.Consul.StateDir; dir != "" {
		if err := writableDir(dir); err != nil {
			bad([]string{"consul", "state_dir"}, "State directory not writable", fmt.Sprintf("consul.state_dir = %q: %v; the daemon keeps the last accepted KV policy there. Create it, writable by the daemon's user.", dir, err))
		}
	}
	return diags
}

// readSettingFile reads a regular file, at most maxSettingFile bytes, with
// policy.ReadBoundedFile: a FIFO (a token_file, or a file validate is
// given) is refused at once, not waited on for a writer, and a file over
// the limit is refused by its size before it is read.
func readSettingFile(path string) ([]byte, error) {
	return policy.ReadBoundedFile(context.Background(), path, maxSettingFile)
}

// writableDir says why dir cannot be written by this user (nil if it can,
// or if it does not exist and its parent can: the daemon creates it).
func writableDir(dir string) error {
	st, err := os.Stat(dir)
	if os.IsNotExist(err) {
		return writableDir(filepath.Dir(dir))
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("not a directory")
	}
	return unix.Access(dir, unix.W_OK|unix.X_OK)
}

func dotted(path []string) string {
	s := ""
	for i, p := range path {
		if i > 0 {
			s += "."
		}
		s += p
	}
	return s
}

// findSetting finds where an attribute of the daemon settings is written
// (path: block types, then the attribute name) in the first file that
// has it; nil if none does (a setting from the environment).
func findSetting(files []string, path ...string) *hcl.Range {
	for _, name := range files {
		src, err := readSettingFile(name)
		if err != nil {
			continue
		}
		if policy.CheckNesting(name, src).HasErrors() {
			continue // hcl's parser would overflow the stack on it
		}
		f, diags := hclsyntax.ParseConfig(src, name, hcl.InitialPos)
		if diags.HasErrors() {
			continue
		}
		body, ok := f.Body.(*hclsyntax.Body)
		if !ok {
			continue
		}
		if rng := findIn(body, path); rng != nil {
			return rng
		}
	}
	return nil
}

func findIn(body *hclsyntax.Body, path []string) *hcl.Range {
	if len(path) == 1 {
		if a, ok := body.Attributes[path[0]]; ok {
			rng := a.SrcRange
			return &rng
		}
		return nil
	}
	for _, b := range body.Blocks {
		if b.Type == path[0] {
			if rng := findIn(b.Body, path[1:]); rng != nil {
				return rng
			}
		}
	}
	return nil
}
