# Sidecar Envoys on application VMs: every proxy whose node.cluster starts
# with "sidecar-" gets loopback listeners for the services it calls. An
# application talks to 127.0.0.1:9001 for api and 127.0.0.1:9002 for the
# database; Envoy load-balances over Consul's healthy instances.

service "postgres" {
  connect_timeout = "2s"
  only_passing    = true # a warning check means "do not use"
}

proxy "sidecar-*" {
  listener "api" {
    address = "127.0.0.1"
    port    = 9001

    virtual_host "api" {
      route {
        service = "api"
        timeout = "5s"
        retry {
          attempts = 2
          on       = ["connect-failure", "refused-stream"]
        }
      }
    }
  }

  listener "postgres" {
    address      = "127.0.0.1"
    port         = 9002
    protocol     = "tcp"
    service      = "postgres"
    idle_timeout = "30m"
  }
}
