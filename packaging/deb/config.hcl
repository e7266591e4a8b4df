# consul-xds-bridge: the package's default configuration. Edit it, check it
# with `consul-xds-bridge validate /etc/consul-xds-bridge/config.hcl`, and
# `systemctl reload consul-xds-bridge` (policy) or restart (settings).
# Reference: /usr/share/doc/consul-xds-bridge/README.md and docs/reference/daemon-settings.md there.

consul {
  address = "127.0.0.1:8500"
  # token_file = "/etc/consul-xds-bridge/token"   # an ACL token with read access
  stale     = true
  state_dir = "/var/lib/consul-xds-bridge"
}

# Loopback only: serving other hosts needs TLS, see
# /usr/share/doc/consul-xds-bridge/examples/config-central.hcl.
xds {
  listen = "127.0.0.1:18000"
}

# The console (http://127.0.0.1:19100/ui/), status and plan use the token
# the package wrote into admin-token at install.
admin {
  listen     = "127.0.0.1:19100"
  token_file = "/etc/consul-xds-bridge/admin-token"
}

log {
  level  = "info"
  format = "json"
}

# Routing policy: add service, proxy and grpc_service blocks here or in
# Consul KV (consul { kv_prefix }). Without them every Consul service is
# a cluster.
export_all_services = true
