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

xds {
  listen = "0.0.0.0:18000"
}

admin {
  listen = "127.0.0.1:19100"      # keep the admin API off the network
}

log {
  level  = "info"
  format = "json"
}
