# Topology 1: one bridge per VM, beside the local Consul agent, serving the
# Envoy on the same host over loopback (or a Unix socket).

consul {
  address    = "127.0.0.1:8500"
  token_file = "/etc/consul-xds-bridge/token"
  stale      = true
  kv_prefix  = "xds-bridge/policy/"   # shared policy for the whole fleet
}

xds {
  listen = "127.0.0.1:18000"      # loopback: only this host's Envoy reaches it
}

admin {
  listen     = "127.0.0.1:19100"
  token_file = "/etc/consul-xds-bridge/admin-token"   # console, status and plan send it
}

log {
  level  = "info"
  format = "json"
}
