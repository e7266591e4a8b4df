proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      domains = ["*"]
      route {
        match {
          path_prefix = "/api/"
        }
        service      = "api"
        timeout      = "3s"
        idle_timeout = "30s"
        retry {
          attempts        = 3
          per_try_timeout = "750ms"
          on              = ["5xx", "connect-failure", "retriable-4xx"]
        }
      }
      # The retry block's defaults: one retry on 5xx, connect-failure,
      # reset. No timeout: Envoy's default (15s).
      route {
        match {
          path_prefix = "/reports/"
        }
        service = "reports"
        retry {
        }
      }
      # "0s" disables the timeouts (long-lived streams).
      route {
        match {
          path_prefix = "/events/"
        }
        service      = "web"
        timeout      = "0s"
        idle_timeout = "0s"
      }
      route {
        match {
          path_prefix = "/"
        }
        service = "web"
        timeout = "1m30s"
      }
    }
  }
}
