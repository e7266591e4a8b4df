proxy "edge" {
  listener "http" {
    port = 8080
    # Every request to standard output, Envoy's default format.
    access_log {
      path = "/dev/stdout"
    }
    # Server errors and slow requests, a tenth of them, as JSON to a file.
    access_log {
      path           = "/var/log/envoy/errors.json"
      json           = { status = "%RESPONSE_CODE%", path = "%REQ(:PATH)%", duration_ms = "%DURATION%" }
      status_classes = ["5xx"]
      min_duration   = "500ms"
      sample_percent = 10
    }
    # Client and server errors to an OpenTelemetry collector (a Consul
    # service: a cluster with endpoints, HTTP/2 without a service block).
    access_log {
      collector      = "otel-collector"
      format         = "%REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE%"
      status_classes = ["4xx", "5xx"]
    }
    virtual_host "all" {
      route {
        service = "web"
      }
    }
  }
}
