# Every local catalog service becomes a cluster (cache, metrics too), with
# default settings unless a service block says otherwise. dc2's api is not
# exported: only local services are.
export_all_services = true

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
