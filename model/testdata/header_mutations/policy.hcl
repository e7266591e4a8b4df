proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      domains = ["*"]
      route {
        match {
          path_prefix = "/api/"
        }
        service = "api"
        request_headers {
          add = {
            "x-forwarded-via" = "edge"
            "x-trace-tag"     = "api"
          }
          set = {
            "x-request-source" = "consul-xds-bridge"
          }
          remove = ["x-debug", "cookie"]
        }
        response_headers {
          add = {
            "cache-control" = "no-store"
          }
          set = {
            "strict-transport-security" = "max-age=31536000"
            "x-served-by"               = "api"
          }
          remove = ["server", "x-powered-by"]
        }
      }
      # Response headers on a direct response too.
      route {
        match {
          path = "/ping"
        }
        direct_response {
          status = 200
          body   = "pong"
        }
        response_headers {
          set = {
            "content-type" = "text/plain"
          }
        }
      }
      route {
        match {
          path_prefix = "/"
        }
        service = "web"
        request_headers {
          remove = ["x-internal-only"]
        }
      }
    }
  }
}
