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
      # Three targets; weights need not sum to 100.
      route {
        match {
          path_prefix = "/api/"
        }
        split {
          service = "api"
          subset  = "v1"
          weight  = 70
        }
        split {
          service = "api"
          subset  = "v2"
          weight  = 25
        }
        split {
          service = "api-next"
          weight  = 5
        }
      }
      # Uneven small weights.
      route {
        match {
          path_prefix = "/beta/"
        }
        split {
          service = "api"
          weight  = 1
        }
        split {
          service = "api-next"
          weight  = 3
        }
      }
      # A single split is a plain cluster route.
      route {
        match {
          path_prefix = "/"
        }
        split {
          service = "web"
          weight  = 10
        }
      }
    }
  }
}
