proxy "edge" {
  # WebSockets on every route of the listener.
  listener "ws" {
    port     = 8081
    upgrades = ["websocket"]
    virtual_host "all" {
      route {
        service = "web"
      }
    }
  }
  # WebSockets on one route only: an RDS setting.
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        match {
          path_prefix = "/live/"
        }
        service  = "api"
        upgrades = ["websocket"]
      }
      route {
        service = "web"
      }
    }
  }
}
