proxy "edge" {
  # brotli preferred, then gzip and zstd, for JSON and HTML of 1 KiB or more.
  listener "http" {
    port = 8080
    compression {
      algorithms    = ["brotli", "gzip", "zstd"]
      content_types = ["application/json", "text/html"]
      min_length    = 1024
    }
    virtual_host "all" {
      route {
        match {
          path_prefix = "/download/"
        }
        service     = "web"
        compression = false
      }
      route {
        service = "api"
      }
    }
  }
  # Envoy's defaults: gzip, its content types and minimum length.
  listener "plain" {
    port = 8081
    compression {
    }
    virtual_host "all" {
      route {
        service = "web"
      }
    }
  }
}
