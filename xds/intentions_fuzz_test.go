package xds_test

import (
	"encoding/json"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/intention"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// FuzzResolveTranslates: whatever entries Resolve accepts, the HTTP RBAC
// builds, passes Envoy's validation and decides as the intentions do;
// the network RBAC builds exactly when no rule has L7 permissions. What
// Resolve rejects never reaches a proxy. Nothing panics.
func FuzzResolveTranslates(f *testing.F) {
	for _, seed := range []string{
		`[{"Destination":"api","Sources":[{"Name":"web","Action":"allow"},{"Name":"*","Action":"deny"}]}]`,
		`[{"Destination":"*","Sources":[{"Name":"web","Action":"deny"}]},{"Destination":"api","Sources":[{"Name":"*","Action":"allow"}]}]`,
		`[{"Destination":"api","Sources":[{"Name":"web","Permissions":[{"Action":"deny","HTTP":{"PathPrefix":"/admin"}},{"Action":"allow","HTTP":{"Methods":["GET"],"Header":[{"Name":"x-team","Regex":"b.*"}]}}]}]}]`,
		`[{"Destination":"api","Sources":[{"Name":"*","Namespace":"*","Action":"allow"},{"Name":"","Action":"bogus"}]}]`,
		`[{"Destination":"api","Sources":[{"Name":"web","Permissions":[{"Action":"allow","HTTP":{"PathRegex":"(["}}]}]}]`,
		`[]`,
	} {
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, data string, defAllow bool) {
		var entries []intention.Entry
		if json.Unmarshal([]byte(data), &entries) != nil {
			return
		}
		def := ir.IntentionDeny
		if defAllow {
			def = ir.IntentionAllow
		}
		in, err := intention.Resolve(entries, "api", def)
		if err != nil {
			return
		}
		checkAgainstDecide(t, in, true)
		l7 := false
		for _, r := range in.Rules {
			l7 = l7 || len(r.Permissions) > 0
		}
		if _, err := xds.NetworkRBAC(in); (err != nil) != l7 {
			t.Fatalf("NetworkRBAC error %v with L7 rules %v", err, l7)
		}
		if !l7 {
			checkAgainstDecide(t, in, false)
		}
	})
}
