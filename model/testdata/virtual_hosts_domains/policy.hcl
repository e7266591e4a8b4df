proxy "edge" {
  listener "http" {
    address = "127.0.0.1"
    port    = 8080
    # Exact names, with and without a port.
    virtual_host "shop" {
      domains = ["shop.example.com", "shop.example.com:8080"]
      route {
        match {
          path_prefix = "/"
        }
        service = "shop"
      }
    }
    # Prefix wildcard.
    virtual_host "api" {
      domains = ["*.api.example.com", "api.example.com"]
      route {
        match {
          path_prefix = "/v1/"
        }
        service = "api"
      }
    }
    # Suffix wildcard.
    virtual_host "admin" {
      domains = ["admin.*"]
      route {
        match {
          path_prefix = "/"
        }
        service = "admin"
      }
    }
    # No domains means "*": the catch-all (and no match block means
    # path_prefix "/").
    virtual_host "default" {
      route {
        service = "web"
      }
    }
  }
}
