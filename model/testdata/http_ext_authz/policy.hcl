proxy "edge" {
  # Every request checked by "authz" (a Consul service without a service
  # block: it gets an HTTP/2 cluster), failing closed; only the
  # authorization and cookie headers are sent. The health route is
  # exempt, an RDS-only setting.
  listener "http" {
    port = 8080
    ext_authz {
      service = "authz"
      timeout = "250ms"
      headers = ["Authorization", "cookie"]
    }
    virtual_host "all" {
      route {
        match {
          path = "/healthz"
        }
        service   = "web"
        ext_authz = false
      }
      route {
        service = "web"
      }
    }
  }
  # Failing open: requests pass while the service is unreachable.
  listener "internal" {
    port = 8081
    ext_authz {
      service      = "authz"
      failure_mode = "allow"
    }
    virtual_host "all" {
      route {
        service = "api"
      }
    }
  }
}
