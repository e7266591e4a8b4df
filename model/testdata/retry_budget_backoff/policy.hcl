# A retry budget instead of a fixed max_retries, and back-off per route.
service "api" {
  circuit_breaker {
    max_requests = 1024
    retry_budget {
      percent         = 25
      min_concurrency = 5
    }
  }
}

service "web" {
  circuit_breaker {
    retry_budget {
    }
  }
}

proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        match {
          path_prefix = "/api/"
        }
        service = "api"
        retry {
          attempts      = 3
          base_interval = "50ms"
          max_interval  = "1s"
        }
      }
      route {
        service = "web"
        retry {
          base_interval = "10ms"
        }
      }
    }
  }
}
