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

// maxTokenFileBytes bounds the admin token file the CLI reads (a line).
const maxTokenFileBytes = 4 << 10

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
	// tokenFrom says where the token came from, for messages.
	tokenFrom string
	http      *http.Client
}

// newAdminClient picks the address (-admin, else the config's admin
// block, else the default) and the token: -admin-token-file, else
// $CONSUL_XDS_BRIDGE_ADMIN_TOKEN, else the file the bridge itself reads
// (admin.token_file, else the admin-token it generated in its state
// directory: policy.Settings.AdminTokenPath). The environment comes
// before the bridge's file because an operator may not be allowed to read
// it. The token is never printed.
func newAdminClient(f adminFlags, settings *policy.Settings) (*adminClient, error) {
	if settings == nil {
		s := policy.DefaultSettings()
		settings = &s
	}
	addr := f.addr
	if addr == "" {
		addr = settings.Admin.Listen
	}
	c := &adminClient{addr: addr, base: "http://" + addr, http: &http.Client{Timeout: 10 * time.Second}}
	tokenFile := f.tokenFile
	if env := strings.TrimSpace(os.Getenv(adminTokenEnv)); tokenFile == "" && env != "" {
		c.token, c.tokenFrom = env, "$"+adminTokenEnv
	} else if tokenFile == "" {
		path, generated, err := settings.AdminTokenPath()
		if err == nil {
			tokenFile = path
		}
		if _, statErr := os.Stat(path); generated && statErr != nil {
			// The bridge has not generated it (yet), or runs as
			// another user: ask without a token and say how.
			tokenFile = ""
		}
	}
	if tokenFile != "" {
		b, err := policy.ReadBoundedFile(context.Background(), tokenFile, maxTokenFileBytes)
		if err != nil {
			return nil, fmt.Errorf("admin token: %w (or set $%s)", err, adminTokenEnv)
		}
		if c.token = strings.TrimSpace(string(b)); c.token == "" {
			return nil, fmt.Errorf("admin token file %s is empty", tokenFile)
		}
		c.tokenFrom = tokenFile
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

// adminSettings loads the settings of the -config files, or nil
// without any.
func adminSettings(configs []string) (*policy.Settings, error) {
	if len(configs) == 0 {
		return nil, nil
	}
	cfg, _, diags := policy.LoadFiles(configs...)
	if diags.HasErrors() {
		return nil, fmt.Errorf("%s", strings.Join(policy.FormatDiagnostics(diags), "\n"))
	}
	return &cfg.Settings, nil
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
		hint := "give the admin token with -admin-token-file or $" + adminTokenEnv + " (the bridge logs the file it reads as admin_token_file), or -config with the bridge's files"
		if c.token != "" {
			hint = "the admin token from " + c.tokenFrom + " was refused; give another with -admin-token-file or $" + adminTokenEnv
		}
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, hint)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
