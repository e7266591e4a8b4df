service "otel-collector" {
  http2 = true
  connect_timeout = "2s"
}

proxy "edge" {
  # A tenth of the requests traced to the collector (a Consul service with
  # its own service block), keeping the request ids of the edge in front.
  listener "http" {
    port = 8080
    tracing {
      collector           = "otel-collector"
      sample_percent      = 10
      service_name        = "edge-gateway"
      preserve_request_id = true
    }
    virtual_host "all" {
      route {
        service = "web"
      }
    }
  }
  # Every request traced, named after the group.
  listener "internal" {
    port = 8081
    tracing {
      collector = "otel-collector"
    }
    virtual_host "all" {
      route {
        service = "api"
      }
    }
  }
}
