# The per-VM agent (`consul-xds-bridge agent -config /etc/consul-xds-bridge/agent.hcl`):
# local Envoys and proxyless gRPC clients connect to its Unix socket; it
# relays the central bridges over mTLS and keeps the last good config of
# each local proxy group in data_dir, so a proxy (re)starting while every
# central replica is down still gets its whole config at once.

node_id        = "vm-web-1"                          # default: the host name
data_dir       = "/var/lib/consul-xds-bridge/agent"  # last good config, files 0600
consul_address = "127.0.0.1:8500"                    # the local Consul agent (unset: CONSUL_HTTP_ADDR, else this; token: CONSUL_HTTP_TOKEN or CONSUL_HTTP_TOKEN_FILE)

# The node.cluster values (proxy groups) local proxies may claim; anything
# else is refused with PermissionDenied.
allow_groups = ["web", "sidecar-web-*"]

listen {
  socket       = "/run/consul-xds-bridge/agent.sock"
  socket_mode  = "0660"   # owner and group only
  socket_group = "envoy"  # the group Envoy (envoy.service) runs as
  # tcp = "127.0.0.1:18001"  # for clients that cannot use a Unix socket
}

upstream {
  # The central bridge replicas: the passing instances of their Consul
  # service (central bridges register themselves with consul.register),
  # asked of the local Consul agent. Or a static list:
  #   addresses = ["bridge-1.internal:18000", "bridge-2.internal:18000"]
  consul_service = "consul-xds-bridge"

  # The largest response relayed from the central bridge (and sent on to
  # local proxies). Default: the central bridge's send limit, 64MiB.
  # max_message_size = "64MiB"

  tls {
    ca_file   = "/etc/consul-xds-bridge/ca.pem"
    cert_file = "/etc/consul-xds-bridge/agent.pem"     # e.g. URI SAN spiffe://example.org/group/web
    key_file  = "/etc/consul-xds-bridge/agent-key.pem"
    # server_name = "bridge.internal"  # default: the replica's host
  }
}

# Connect identities of this VM's services, served over SDS to local proxies
# as secrets "consul-connect/leaf/SERVICE" and "consul-connect/roots". The
# local Consul agent makes and renews the keys; they never leave the VM.
connect {
  services = ["web"]

  # A leaf holds its service's private key: it goes only to a proxy acting
  # for the service, from an allowed local user. Acting for web: its
  # Connect sidecar registered on the local Consul agent (node.id = the
  # sidecar's service id), and the node.cluster values listed here.
  # Allowed users: those listed (names or numbers; uid, or primary gid),
  # by default root, this agent's user and socket_group. Over the tcp
  # listener no leaf is served.
  service "web" {
    proxy_groups = ["web"]
    users        = ["envoy"]
  }
}

admin {
  listen = "127.0.0.1:19101"   # /healthz /readyz /v1/proxies /metrics
}

log_level = "info"
