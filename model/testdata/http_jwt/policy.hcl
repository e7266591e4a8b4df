proxy "edge" {
  listener "http" {
    port = 8080
    # Tokens of the identity provider, whose key set Envoy fetches from
    # "auth" (a Consul service; without a service block it gets a plain
    # cluster) and caches for ten minutes.
    jwt_provider "corp" {
      issuer                 = "https://auth.example.com"
      audiences              = ["shop"]
      jwks_service           = "auth"
      jwks_url               = "https://auth.example.com/.well-known/jwks.json"
      cache_duration         = "10m"
      forward_payload_header = "x-jwt-payload"
      claim_headers          = { sub = "x-user-id" }
    }
    # A partner's keys, read by the bridge from a file next to this one.
    jwt_provider "partner" {
      issuer    = "https://partner.example.net"
      jwks_file = "jwks.json"
      forward   = true
    }
    virtual_host "shop" {
      domains = ["*"]
      # Every route of the virtual host requires a corp token...
      jwt {
        provider = "corp"
      }
      route {
        match {
          path_prefix = "/partner/"
        }
        service = "api"
        jwt {
          provider = "partner"
        }
      }
      # ...the catalog may be browsed without one...
      route {
        match {
          path_prefix = "/catalog/"
        }
        service = "web"
        jwt {
          provider      = "corp"
          allow_missing = true
        }
      }
      # ...and health checks need none.
      route {
        match {
          path = "/healthz"
        }
        service = "web"
        jwt {
          bypass = true
        }
      }
      route {
        service = "web"
      }
    }
  }
}
