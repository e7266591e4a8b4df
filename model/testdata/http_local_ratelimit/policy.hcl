proxy "edge" {
  # A listener-wide bucket, a virtual host's own, and a route's with
  # per-client descriptors.
  listener "http" {
    port = 8080
    rate_limit {
      requests = 1000
      interval = "1s"
    }
    virtual_host "shop" {
      domains = ["shop.example.com"]
      rate_limit {
        requests           = 100
        burst              = 200
        status             = 503
        headers            = { "x-ratelimited" = "local" }
        rate_limit_headers = true
      }
      route {
        match {
          path_prefix = "/api/"
        }
        service = "api"
        rate_limit {
          requests = 50
          interval = "500ms"
          descriptor {
            header   = "x-api-key"
            requests = 5
            interval = "1s"
          }
          descriptor {
            header   = "x-api-key"
            value    = "partner"
            requests = 40
            interval = "500ms"
          }
          descriptor {
            client_address = true
            requests       = 10
          }
        }
      }
      route {
        service = "web"
      }
    }
    virtual_host "other" {
      route {
        service = "web"
      }
    }
  }
}
