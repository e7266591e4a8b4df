proxy "edge" {
  listener "http" {
    port = 8080
    # CORS per virtual host, with a route that overrides part of it.
    virtual_host "shop" {
      domains = ["shop.example.com"]
      cors {
        allow_origins      = ["https://shop.example.com"]
        allow_origin_regex = ["^https://[a-z0-9-]+\\.shop\\.example\\.com$"]
        allow_methods      = ["GET", "POST"]
        allow_headers      = ["content-type", "authorization"]
        expose_headers     = ["x-request-id"]
        max_age            = "10m"
        allow_credentials  = true
      }
      route {
        match {
          path_prefix = "/api/"
        }
        service = "api"
        # Inherits origins and the rest; only methods differ.
        cors {
          allow_methods = ["GET", "PUT", "DELETE"]
        }
      }
      route {
        service = "web"
      }
    }
    # CORS on one route only.
    virtual_host "public" {
      domains = ["public.example.com"]
      route {
        match {
          path_prefix = "/feed"
        }
        service = "api"
        cors {
          allow_origins = ["*"]
        }
      }
      route {
        service = "web"
      }
    }
  }
}
