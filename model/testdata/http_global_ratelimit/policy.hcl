service "ratelimit" {
  http2           = true
  connect_timeout = "1s"
}

proxy "edge" {
  # Requests counted by the envoyproxy/ratelimit service (domain "edge"),
  # refused with 500 when it cannot answer within 50ms.
  listener "http" {
    port = 8080
    rate_limit_service {
      service      = "ratelimit"
      domain       = "edge"
      failure_mode = "deny"
      timeout      = "50ms"
    }
    virtual_host "shop" {
      domains = ["*"]
      # Every request of the virtual host, by client address...
      global_rate_limit {
        descriptor {
          entry {
            client_address = true
          }
        }
      }
      # ...except checkout, counted per user under a fixed key, and per
      # address.
      route {
        match {
          path_prefix = "/checkout/"
        }
        service = "api"
        global_rate_limit {
          descriptor {
            entry {
              generic_key = "checkout"
            }
            entry {
              header = "X-User-Id"
              key    = "user"
            }
          }
          descriptor {
            entry {
              client_address = true
            }
          }
        }
      }
      route {
        service = "web"
      }
    }
  }
}
