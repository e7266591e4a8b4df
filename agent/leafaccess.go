package agent

import (
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// Who gets a Connect leaf. A leaf carries its service's private key, so
// the agent serves it only to a proxy acting for that service: the
// service's Connect sidecar registered on the local Consul agent (its
// node.id is the proxy's service id; it is keyed to its sidecar group by
// that registration, not by anything it announces), or a node.cluster the
// configuration maps to the service (connect { service "web" {
// proxy_groups = [...] } }). And only to a socket peer whose uid or
// (primary) gid, read by the kernel (SO_PEERCRED), is allowed for the
// service; never over TCP, where the peer cannot be told. Every other
// key is served the CA roots and no leaf, so a request by name for
// another service's leaf gets nothing (and is counted: leafgate.go).

// LeafAccess is who may act for one connect service.
type LeafAccess struct {
	// ProxyGroups are node.cluster values (exact names) that act for the
	// service besides its registered sidecar.
	ProxyGroups []string
	// Users and UnixGroups (names or numbers, resolved when the agent
	// starts) are the socket peers allowed: a peer whose uid is a user's
	// or whose primary gid is a group's. Both empty: the defaults
	// (defaultPeers).
	Users, UnixGroups []string
}

// peerSet is a LeafAccess's users and groups, resolved.
type peerSet struct{ uids, gids []uint32 }

// defaultPeers is who may act for a service without users or unix_groups
// set: root, the agent's own user, and processes whose primary group is
// the socket's group (socket_group), which is who a 0660 socket lets in;
// a wider socket_mode widens nothing here.
func defaultPeers(socketGroup string) (peerSet, error) {
	p := peerSet{uids: []uint32{0}}
	if uid := uint32(os.Geteuid()); uid != 0 {
		p.uids = append(p.uids, uid)
	}
	if socketGroup != "" {
		gid, err := lookupID(socketGroup, user.LookupGroup, func(g *user.Group) string { return g.Gid })
		if err != nil {
			return p, fmt.Errorf("listen socket_group: %w", err)
		}
		p.gids = []uint32{gid}
	}
	return p, nil
}

// resolvePeers resolves every connect service's users and groups, at
// start: an unknown name stops the agent, naming the setting.
func (c *Config) resolvePeers() (map[string]peerSet, error) {
	def, err := defaultPeers(c.SocketGroup)
	if err != nil && len(c.ConnectServices) > 0 {
		return nil, err
	}
	out := map[string]peerSet{}
	for _, svc := range c.ConnectServices {
		acc := c.Leaf[svc]
		if len(acc.Users) == 0 && len(acc.UnixGroups) == 0 {
			out[svc] = def
			continue
		}
		var p peerSet
		for _, u := range acc.Users {
			id, err := lookupID(u, user.Lookup, func(u *user.User) string { return u.Uid })
			if err != nil {
				return nil, fmt.Errorf("connect service %q users: %w", svc, err)
			}
			p.uids = append(p.uids, id)
		}
		for _, g := range acc.UnixGroups {
			id, err := lookupID(g, user.LookupGroup, func(g *user.Group) string { return g.Gid })
			if err != nil {
				return nil, fmt.Errorf("connect service %q unix_groups: %w", svc, err)
			}
			p.gids = append(p.gids, id)
		}
		out[svc] = p
	}
	return out, nil
}

// peerAllowed says whether a socket peer may act for svc, or why not.
func (a *Agent) peerAllowed(svc string, cred PeerCred, fromSocket bool) error {
	if !fromSocket {
		return fmt.Errorf("it acts for Connect service %q, whose leaf certificate and key are served only over the agent's Unix socket (%s), where the peer is known; connect there instead of over TCP", svc, a.cfg.Socket)
	}
	p := a.peers[svc]
	if slices.Contains(p.uids, cred.UID) || slices.Contains(p.gids, cred.GID) {
		return nil
	}
	return fmt.Errorf("the process (uid %d, gid %d) may not act for Connect service %q, whose leaf certificate and key it would get: allowed uids %v, gids %v; run the proxy as an allowed user or list it in connect { service %q { users = [...] } } in the agent config", cred.UID, cred.GID, svc, p.uids, p.gids, svc)
}

// leafServices are the connect services key acts for.
func (a *Agent) leafServices(key string) []string {
	k := serve.ParseRelayKey(key)
	var out []string
	if a.sidecars != nil && strings.HasPrefix(k.NodeCluster, ir.SidecarGroupPrefix) {
		for _, svc := range a.actsFor(k) { // gateways.go
			if slices.Contains(a.cfg.ConnectServices, svc) {
				out = append(out, svc)
			}
		}
		return out // a sidecar group is no proxy group of the config
	}
	for _, svc := range a.cfg.ConnectServices {
		if slices.Contains(a.cfg.Leaf[svc].ProxyGroups, k.NodeCluster) {
			out = append(out, svc)
		}
	}
	return out
}

// parseLeafAccess decodes the connect service blocks.
func parseLeafAccess(blocks []connectServiceBlock, c *Config, diags hcl.Diagnostics) (map[string]LeafAccess, hcl.Diagnostics) {
	bad := func(rng hcl.Range, summary, detail string, args ...any) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: fmt.Sprintf(detail, args...), Subject: rng.Ptr()})
	}
	out := map[string]LeafAccess{}
	seen := map[string]hcl.Range{}
	for _, b := range blocks {
		if prev, dup := seen[b.Name]; dup {
			bad(b.DefRange, "Duplicate connect service block", "service %q is already configured (previous definition at %s).", b.Name, prev)
			continue
		}
		seen[b.Name] = b.DefRange
		if !slices.Contains(c.ConnectServices, b.Name) {
			bad(b.DefRange, "Unknown connect service", "service %q is not in connect.services %q; add it there, or remove this block.", b.Name, c.ConnectServices)
		}
		var acc LeafAccess
		for _, g := range b.ProxyGroups {
			switch {
			case g == "" || strings.ContainsAny(g, `*?[\`):
				bad(b.DefRange, "Invalid proxy group", "proxy_groups %q: list exact node.cluster values; a pattern would let any matching group get %q's private key.", g, b.Name)
			case strings.HasPrefix(g, ir.SidecarGroupPrefix):
				bad(b.DefRange, "Invalid proxy group", "proxy_groups %q: sidecar groups are known from their Consul registration, not listed.", g)
			case !matchAny(c.AllowGroups, g):
				bad(b.DefRange, "Proxy group not allowed", "proxy_groups %q: no local proxy may claim it (allow_groups %q); add it there.", g, c.AllowGroups)
			default:
				acc.ProxyGroups = append(acc.ProxyGroups, g)
			}
		}
		acc.Users, acc.UnixGroups = b.Users, b.UnixGroups
		out[b.Name] = acc
	}
	return out, diags
}

// lookupID resolves a user or group given by name or number.
func lookupID[T any](s string, lookup func(string) (*T, error), id func(*T) string) (uint32, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(n), nil
	}
	v, err := lookup(s)
	if err != nil {
		return 0, fmt.Errorf("%q: %w (give a name known on this host or a number)", s, err)
	}
	n, err := strconv.ParseUint(id(v), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q: id %q is not a number", s, id(v))
	}
	return uint32(n), nil
}

// minMessageSize is the smallest max_message_size: below it even small
// worlds would not pass.
const minMessageSize = 1 << 20

// parseSize reads a byte size: a number of bytes, or one with a unit
// (KiB, MiB, GiB; KB, MB, GB as powers of ten).
func parseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mult := 1
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.Atoi(t)
	if err != nil || n <= 0 || n > (1<<31)/mult {
		return 0, fmt.Errorf("%q is not a size: write bytes or a number with KiB, MiB, GiB (e.g. \"64MiB\")", s)
	}
	return n * mult, nil
}
