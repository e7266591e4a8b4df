proxy "edge" {
  # Uses fault: HCM gets the fault filter before the router.
  listener "chaos" {
    port = 8081
    virtual_host "all" {
      domains = ["*"]
      route {
        match {
          path_prefix = "/api/"
        }
        service = "api"
        fault {
          delay {
            duration = "2s"
            percent  = 10
          }
          abort {
            status  = 503
            percent = 1.5
          }
        }
      }
      route {
        match {
          path_prefix = "/slow/"
        }
        service = "web"
        fault {
          delay {
            duration = "250ms"
          }
        }
      }
      route {
        match {
          path_prefix = "/"
        }
        service = "web"
      }
    }
  }
  # No route uses fault: router only.
  listener "http" {
    port = 8080
    virtual_host "all" {
      domains = ["*"]
      route {
        service = "web"
      }
    }
  }
}
