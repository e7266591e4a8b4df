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

# ---------------------------------------------------------------------------
# Routing policy. Envoys whose node.cluster is "edge" get listener
# "edge.http" on :8080; every proxy gets one cluster per Consul service,
# and proxyless gRPC clients reach each one as xds:///NAME (the demo's
# client calls xds:///echo).
# More policy can live in Consul KV under consul.kv_prefix.

export_all_services = true

service "web" {
  connect_timeout = "1s"
  subset "v1" {
    tags = ["v1"]
  }
  subset "v2" {
    tags = ["v2"]
  }
}

proxy "edge" {
  listener "http" {
    port = 8080

    virtual_host "demo" {
      domains = ["*"]

      route {
        match {
          path_prefix = "/api/"
        }
        service = "api"
        timeout = "2s"
        retry {
          attempts = 2
          on       = ["5xx", "connect-failure"]
        }
      }

      # 80/20 canary split: instances tagged v2 get a fifth of the
      # traffic. The 80 goes to subset v1, not to all of "web": that would
      # include the v2 instances too and give them about half.
      route {
        split {
          service = "web"
          subset  = "v1"
          weight  = 80
        }
        split {
          service = "web"
          subset  = "v2"
          weight  = 20
        }
      }
    }
  }
}
