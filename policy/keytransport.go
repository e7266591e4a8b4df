package policy

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/unixsock"
)

// KeyUse is one place a policy makes the bridge send a private key to
// proxies.
type KeyUse struct {
	// What says which key, for messages ("the private key in
	// /etc/edge/key.pem", "every sidecar's Connect leaf key").
	What  string
	Range hcl.Range
}

// PrivateKeys lists where the policy makes the bridge serve private keys
// over xDS: listener (edge) and upstream TLS key files, and the Connect
// leaves of central mesh mode.
func (p *Policy) PrivateKeys() []KeyUse {
	if p == nil {
		return nil
	}
	var out []KeyUse
	if p.CentralMesh() {
		out = append(out, KeyUse{What: "mesh mode \"central\" (every sidecar's Connect leaf key)", Range: p.Mesh.ModeRange})
	}
	for _, f := range p.Files() {
		if f.Kind == PEMPrivateKey {
			out = append(out, KeyUse{What: "the private key in " + f.Path, Range: f.Range})
		}
	}
	return out
}

// KeyTransportProblem says why xDS served with these settings would let
// a private key reach whoever claims a proxy's node id, or "" when keys
// travel only over mTLS with authorize_nodes or over a Unix socket that
// only its owner and group may connect to (the kernel checks the peer).
func KeyTransportProblem(s XDSSettings) string {
	if strings.HasPrefix(s.Listen, "unix://") {
		mode := s.SocketMode
		if mode == 0 {
			mode = unixsock.DefaultMode
		}
		if mode&0o007 != 0 {
			return fmt.Sprintf("the xDS Unix socket's socket_mode %04o lets any local user connect and claim a proxy's node id; use 0660 (owner and socket_group) or stricter", mode.Perm())
		}
		return ""
	}
	switch {
	case s.TLS.CertFile == "":
		return fmt.Sprintf("xDS on %s is plaintext: anyone who can reach it and claims a proxy's node id gets that proxy's keys; set xds { tls { cert_file, key_file, client_ca_file } } and authorize_nodes = true", s.Listen)
	case s.TLS.ClientCAFile == "":
		return fmt.Sprintf("xDS on %s is TLS without client certificates: any client claiming a proxy's node id gets that proxy's keys; set xds { tls { client_ca_file } } and authorize_nodes = true", s.Listen)
	case !s.AuthorizeNodes:
		return fmt.Sprintf("xDS on %s checks client certificates but not the node a client claims: a certificate of one group claiming another group's node (or a sidecar's id) gets its keys; set xds { authorize_nodes = true }", s.Listen)
	}
	return ""
}

// CheckKeyTransport rejects a policy that serves private keys when the
// xDS settings do not protect them in transit (KeyTransportProblem),
// one error per place a key is named; with xds { insecure_serve_keys =
// true } (lab only) it returns nothing and the daemon warns instead.
func CheckKeyTransport(s XDSSettings, p *Policy) hcl.Diagnostics {
	if s.InsecureServeKeys {
		return nil
	}
	problem := KeyTransportProblem(s)
	if problem == "" {
		return nil
	}
	var diags hcl.Diagnostics
	for _, k := range p.PrivateKeys() {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Private key would be served without client authentication",
			Detail: fmt.Sprintf("This policy makes the bridge send %s to proxies, but %s. "+
				"(xds { insecure_serve_keys = true } allows it in a lab, with a warning at every start.)", k.What, problem),
			Subject: k.Range.Ptr(),
		})
	}
	return diags
}
