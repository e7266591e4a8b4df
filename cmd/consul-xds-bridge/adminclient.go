package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// adminTokenEnv holds the admin bearer token for status and plan when
// neither -admin-token-file nor the config's admin.token_file gives one.
const adminTokenEnv = "CONSUL_XDS_BRIDGE_ADMIN_TOKEN"

// adminFlags are the flags status and plan share to reach the admin API.
type adminFlags struct {
	addr      string
	tokenFile string
}

func (f *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "admin", "", "bridge admin address host:port or unix:///path (default: from -config, else "+policy.DefaultAdminListen+")")
	fs.StringVar(&f.tokenFile, "admin-token-file", "", "file holding the admin bearer token (default: $"+adminTokenEnv+", else the config's admin.token_file)")
}

// adminClient calls the running bridge's admin API, over TCP or a Unix
// socket, with its bearer token when one is configured.
type adminClient struct {
	addr  string // as given, for messages
	base  string // URL prefix
	token string
	http  *http.Client
}

// newAdminClient picks the address (-admin, else the config's admin
// block, else the default) and the token: -admin-token-file, else
// $CONSUL_XDS_BRIDGE_ADMIN_TOKEN, else the config's admin.token_file (the
// file the bridge itself reads; the environment comes first because an
// operator may not be allowed to read the daemon's file). The token is
// never printed.
func newAdminClient(f adminFlags, admin *policy.AdminSettings) (*adminClient, error) {
	if admin == nil {
		admin = &policy.AdminSettings{Listen: policy.DefaultAdminListen}
	}
	addr := f.addr
	if addr == "" {
		addr = admin.Listen
	}
	c := &adminClient{addr: addr, base: "http://" + addr, http: &http.Client{Timeout: 10 * time.Second}}
	tokenFile := f.tokenFile
	if env := strings.TrimSpace(os.Getenv(adminTokenEnv)); tokenFile == "" && env != "" {
		c.token = env
	} else if tokenFile == "" {
		tokenFile = admin.TokenFile
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("admin token: %w (or set $%s)", err, adminTokenEnv)
		}
		if c.token = strings.TrimSpace(string(b)); c.token == "" {
			return nil, fmt.Errorf("admin token file %s is empty", tokenFile)
		}
	}
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		// The host part of the URL is then only a placeholder.
		c.base = "http://admin.sock"
		c.http.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
	}
	return c, nil
}

// adminSettings loads the admin block of the -config files, or nil
// without any.
func adminSettings(configs []string) (*policy.AdminSettings, error) {
	if len(configs) == 0 {
		return nil, nil
	}
	cfg, _, diags := policy.LoadFiles(configs...)
	if diags.HasErrors() {
		return nil, fmt.Errorf("%s", strings.Join(policy.FormatDiagnostics(diags), "\n"))
	}
	return &cfg.Settings.Admin, nil
}

// getJSON fetches an admin endpoint into v.
func (c *adminClient) getJSON(path string, v any) error {
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w (is the bridge running? set -admin ADDR)", c.addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		hint := "give the admin token with -admin-token-file, the config's admin.token_file or $" + adminTokenEnv
		if c.token != "" {
			hint = "the admin token given was refused"
		}
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, hint)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
