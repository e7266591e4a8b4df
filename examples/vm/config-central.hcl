# Topology 2: a few central bridges serving many VMs' Envoys. Run two or
# more replicas behind one DNS name; each Envoy lists them all
# (`bootstrap -xds bridge.internal:18000`, or one -xds per replica).

consul {
  address    = "127.0.0.1:8500"   # the replica's own local agent
  token_file = "/etc/consul-xds-bridge/token"
  stale      = true               # spread reads over all Consul servers
  wait_time  = "5m"               # fewer idle re-polls with many services
  kv_prefix  = "xds-bridge/policy/"
}

# The xDS port hands out the address of every backend: TLS, client
# certificates, and each client limited to the node its certificate names.
# Envoys get theirs with `bootstrap -tls-ca ... -tls-cert ... -tls-key ...`.
xds {
  listen = "0.0.0.0:18000"
  tls {
    cert_file      = "/etc/consul-xds-bridge/tls/server.pem"      # SAN: bridge.internal (the name Envoys dial)
    key_file       = "/etc/consul-xds-bridge/tls/server-key.pem"
    client_ca_file = "/etc/consul-xds-bridge/tls/clients-ca.pem"
  }
  authorize_nodes = true          # URI SAN spiffe://.../group/<node.cluster>[/node/<node.id>]
}

admin {
  listen     = "127.0.0.1:19100"  # keep the admin API off the network
  token_file = "/etc/consul-xds-bridge/admin-token"   # console, status and plan send it
}

log {
  level  = "info"
  format = "json"
}
