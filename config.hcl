# consul-xds-bridge configuration for the local demo (`make run`) and a good
# starting point for a VM that runs the bridge beside its Consul agent.

consul {
  address = "127.0.0.1:8500"
  # datacenter = "dc1"
  # token_file = "/etc/consul-xds-bridge/token"   # or CONSUL_HTTP_TOKEN(_FILE)
  stale     = true    # any server may answer: spreads load off the leader
  wait_time = "60s"   # how long one blocking query waits for a change
}

xds {
  listen = "127.0.0.1:18000"
}

admin {
  listen = "127.0.0.1:19100"
}

log {
  level  = "info"
  format = "console"
}
