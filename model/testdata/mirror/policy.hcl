service "api" {
  subset "v1" {
    tags = ["v1"]
  }
  subset "v2" {
    tags = ["v2"]
  }
}

proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      domains = ["*"]
      # 5% of API traffic copied to the shadow service.
      route {
        match {
          path_prefix = "/api/"
        }
        service = "api"
        subset  = "v1"
        mirror {
          service = "shadow"
          percent = 5
        }
      }
      # A fractional share to a subset: 0.5% is 5000 per million.
      route {
        match {
          path_prefix = "/search/"
        }
        service = "api"
        subset  = "v1"
        mirror {
          service = "api"
          subset  = "v2"
          percent = 0.5
        }
      }
      # No percent: every request is mirrored.
      route {
        match {
          path_prefix = "/"
        }
        service = "web"
        mirror {
          service = "shadow"
        }
      }
    }
  }
}
