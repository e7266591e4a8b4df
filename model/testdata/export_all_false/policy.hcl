# Only services the policy names become clusters: api and web, not cache
# or metrics.
export_all_services = false

service "api" {
  connect_timeout = "1s"
  lb_policy       = "least_request"
}

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
      }
      route {
        service = "web"
      }
    }
  }
}
