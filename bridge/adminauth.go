package bridge

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// Who may reach what on the admin listener (docs/security.md):
//   - every request must carry a Host that is an IP literal, localhost
//     or one of admin.hosts: a web page that rebinds its own DNS name to
//     the bridge sends that name and is refused;
//   - a request that is not GET or HEAD must be JSON (a form or a
//     text/plain fetch cannot be) from no Origin or this one, so a web
//     page in the operator's browser cannot post to the bridge;
//   - /healthz, /readyz, /metrics and the console's static files are open
//     (probes and Prometheus; the files hold no data); everything else
//     needs the bearer token.

// openPath says whether an admin path is served without the token.
func openPath(p string) bool {
	return p == "/healthz" || p == "/readyz" || p == "/metrics" || isConsolePath(p)
}

// adminGuard applies the rules above in front of the admin mux.
type adminGuard struct {
	next  http.Handler
	token string
	hosts hostRule
}

func (g *adminGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.hosts.allows(r.Host) {
		writeJSON(w, http.StatusMisdirectedRequest, map[string]string{"error": fmt.Sprintf(
			"Host %q is not this admin API's address; reach it by its listen address, or add the name to admin { hosts = [...] }", r.Host)})
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if why := crossSite(r); why != "" {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": why})
			return
		}
	}
	if openPath(r.URL.Path) {
		g.next.ServeHTTP(w, r)
		return
	}
	got, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(g.token)) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="consul-xds-bridge"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong bearer token (Authorization: Bearer TOKEN; the token is in the file the bridge logged at start as admin_token_file)"})
		return
	}
	g.next.ServeHTTP(w, r)
}

// bearerToken is the token of an "Authorization: Bearer TOKEN" header.
// The scheme is case-insensitive (RFC 9110 §11.1; RFC 6750 names it
// "Bearer"): a client writing "bearer" was refused.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// crossSite says why a state-changing or upload request may come from
// another site, or "". Browsers send a cross-site form or text/plain
// fetch without asking first; JSON needs a CORS preflight, which the
// bridge never answers, and a browser always names the page's origin.
func crossSite(r *http.Request) string {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != "application/json" {
		return fmt.Sprintf("a %s request must send JSON (Content-Type: application/json), not %q", r.Method, ct)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Sprintf("Origin %q is not this admin API; requests from other sites are refused", o)
		}
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return "a request from another site (Sec-Fetch-Site) is refused"
	}
	return ""
}

// hostRule is which Host headers the admin API answers. DNS rebinding
// needs a name the attacker controls, so names are what is checked: an
// IP literal or localhost (any port: an SSH tunnel or a NAT may change
// it) cannot be rebound and passes; any other name must be one of
// admin.hosts.
type hostRule struct {
	unix  bool // a Unix socket: no browser reaches it, any Host goes
	names []string
}

func newHostRule(addr net.Addr, names []string) hostRule {
	_, isTCP := addr.(*net.TCPAddr)
	return hostRule{unix: !isTCP, names: names}
}

func (h hostRule) allows(host string) bool {
	if h.unix {
		return true
	}
	name, _, err := net.SplitHostPort(host)
	if err != nil {
		name = host
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if net.ParseIP(strings.Trim(name, "[]")) != nil || name == "localhost" {
		return name != ""
	}
	for _, n := range h.names {
		if strings.EqualFold(strings.TrimSuffix(n, "."), name) || strings.EqualFold(n, host) {
			return true
		}
	}
	return false
}

// maxTokenFileBytes bounds an admin token file: a token is a line.
const maxTokenFileBytes = 4 << 10

// adminToken reads the admin token from path; when the path is the
// bridge's own (generated), a missing file is created first with a new
// random token, readable by the bridge's user only.
func adminToken(path string, generated bool) (string, error) {
	// Bounded like every file the bridge reads: a token file swapped for
	// a FIFO or /dev/zero must not hang or fill the start.
	b, err := policy.ReadBoundedFile(context.Background(), path, maxTokenFileBytes)
	if errors.Is(err, fs.ErrNotExist) && generated {
		if err := writeNewToken(path); err != nil {
			return "", fmt.Errorf("admin token: creating %s: %w (set admin { token_file } or consul { state_dir } to a writable place)", path, err)
		}
		b, err = policy.ReadBoundedFile(context.Background(), path, maxTokenFileBytes)
	}
	if err != nil {
		return "", fmt.Errorf("admin token_file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("admin token file %s is empty; write a token into it (or delete it if the bridge generated it, to get a new one)", path)
	}
	return tok, nil
}

// writeNewToken creates path with a random token. The file appears
// complete or not at all (written aside, then linked), so a bridge and a
// CLI started at once never read half a token; if another process won
// the race its token stays.
func writeNewToken(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".admin-token-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(hex.EncodeToString(raw) + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Link(f.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// loadAdminToken finds (and at first start creates) the admin token,
// before the listeners are announced, so AdminTokenFile is valid once
// Started is closed.
func (d *Daemon) loadAdminToken() error {
	path, generated, err := d.cfg.Settings.AdminTokenPath()
	if err != nil {
		return fmt.Errorf("admin token: %w (set admin { token_file } or consul { state_dir })", err)
	}
	token, err := adminToken(path, generated)
	if err != nil {
		return err
	}
	d.adminTokenPath, d.adminToken = path, token
	// The path, never the token.
	d.log.Info().Str("admin_token_file", path).Bool("generated", generated).
		Msg("admin API requires a bearer token; status, plan and the console read it from this file")
	return nil
}

// AdminTokenFile is the file holding the admin API's bearer token; valid
// after Started.
func (d *Daemon) AdminTokenFile() string { return d.adminTokenPath }
