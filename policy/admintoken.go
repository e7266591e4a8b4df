package policy

import (
	"os"
	"path/filepath"
)

// AdminTokenFileName is the admin token's file in the state directory
// when admin.token_file is not set.
const AdminTokenFileName = "admin-token"

// AdminTokenPath is where the admin bearer token is: admin.token_file if
// set (the operator's file, never written by the bridge); otherwise the
// file admin-token in the state directory, which the daemon creates at
// first start. The state directory is consul.state_dir, else
// $STATE_DIRECTORY (systemd's StateDirectory=), else the user's config
// directory ($XDG_CONFIG_HOME or ~/.config)/consul-xds-bridge. generated
// says whether the path is the bridge's own (created when missing). The
// CLI (status, plan) finds the token the same way.
func (s Settings) AdminTokenPath() (path string, generated bool, err error) {
	if s.Admin.TokenFile != "" {
		return s.Admin.TokenFile, false, nil
	}
	dir := s.Consul.StateDir
	if dir == "" {
		dir = os.Getenv("STATE_DIRECTORY")
	}
	if dir == "" {
		cfg, err := os.UserConfigDir()
		if err != nil {
			return "", true, err
		}
		dir = filepath.Join(cfg, "consul-xds-bridge")
	}
	return filepath.Join(dir, AdminTokenFileName), true, nil
}
