package bridge

import (
	"slices"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// A JWT provider's key set file is watched like a TLS file, so editing
// it reloads the policy by itself.
func TestPolicyFilePathsIncludeJWKS(t *testing.T) {
	p := &policy.Policy{Proxies: []*policy.Proxy{{Listeners: []*policy.Listener{{JWKSFiles: []*policy.JWKSFile{{Path: "/etc/jwks.json"}, {Path: "/etc/jwks.json"}}}}}}}
	if got := policyFilePaths(p, nil); !slices.Equal(got, []string{"/etc/jwks.json"}) {
		t.Errorf("policyFilePaths = %v", got)
	}
}
