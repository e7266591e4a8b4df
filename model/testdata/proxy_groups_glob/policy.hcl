# Envoys whose node.cluster matches edge-* (edge-eu, edge-us, ...).
proxy "edge-*" {
  listener "http" {
    port = 8080
    virtual_host "public" {
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

# Envoys whose node.cluster is app-0 ... app-9 (app-[0-9]).
proxy "app-[0-9]" {
  listener "db" {
    protocol = "tcp"
    address  = "127.0.0.1"
    port     = 15432
    service  = "db"
  }
  listener "api" {
    address = "127.0.0.1"
    port    = 19090
    virtual_host "api" {
      domains = ["*"]
      route {
        service = "api"
      }
    }
  }
}
