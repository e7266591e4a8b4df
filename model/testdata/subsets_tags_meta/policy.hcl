service "api" {
  subset "v1" {
    tags = ["v1"]
  }
  subset "v2" {
    tags = ["v2"]
  }
  subset "canary" {
    meta = { track = "canary" }
  }
  subset "v2-eu" {
    tags = ["v2"]
    meta = { region = "eu" }
  }
  subset "v3" {
    tags = ["v3"]
  }
}

proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "api" {
      domains = ["*"]
      route {
        match {
          path_prefix = "/"
          header "x-canary" {
            present = true
          }
        }
        service = "api"
        subset  = "canary"
      }
      route {
        match {
          path_prefix = "/"
        }
        split {
          service = "api"
          subset  = "v1"
          weight  = 90
        }
        split {
          service = "api"
          subset  = "v2"
          weight  = 10
        }
      }
    }
  }
}
