# An edge gateway on VMs: Envoys started with --service-cluster edge (or a
# bootstrap whose node.cluster is "edge") get these listeners.

service "api" {
  connect_timeout = "1s"
  lb_policy       = "least_request"

  subset "v1" {
    tags = ["v1"]
  }
  subset "v2" {
    tags = ["v2"]
  }

  circuit_breaker {
    max_connections      = 1024
    max_pending_requests = 256
    max_retries          = 3
  }

  outlier_detection {
    consecutive_5xx    = 5
    interval           = "10s"
    base_ejection_time = "30s"
  }
}

service "web" {
  connect_timeout = "500ms"

  health_check {
    path     = "/health"
    interval = "5s"
    timeout  = "1s"
  }
}

service "carts" {
  lb_policy = "ring_hash"

  # Keep a user's requests on one instance (warm per-user caches).
  hash_policy {
    header = "x-user-id"
  }
}

proxy "edge" {
  listener "http" {
    port = 8080

    # Every request to Envoy's standard output; server errors also to a
    # file, as JSON.
    access_log {
      path = "/dev/stdout"
    }
    access_log {
      path           = "/var/log/envoy/edge-errors.json"
      json           = { status = "%RESPONSE_CODE%", path = "%REQ(:PATH)%", upstream = "%UPSTREAM_HOST%" }
      status_classes = ["5xx"]
    }
    compression {
      algorithms    = ["brotli", "gzip"]
      content_types = ["application/json", "text/html", "text/css", "application/javascript"]
      min_length    = 1024
    }
    # A ceiling for each Envoy; virtual hosts and routes set their own.
    rate_limit {
      requests = 5000
      burst    = 10000
    }

    # Shop users' tokens, verified with the keys Envoy fetches from the
    # identity service ("auth" in Consul); the user id goes upstream.
    jwt_provider "shop" {
      issuer         = "https://auth.shop.example.com"
      audiences      = ["shop-api"]
      jwks_service   = "auth"
      jwks_url       = "https://auth.shop.example.com/.well-known/jwks.json"
      cache_duration = "10m"
      claim_headers  = { sub = "x-user-id" }
    }

    virtual_host "shop" {
      domains = ["shop.example.com", "www.shop.example.com"]

      # The storefront's scripts call the API from the shop's origins.
      cors {
        allow_origins     = ["https://shop.example.com", "https://www.shop.example.com"]
        allow_methods     = ["GET", "POST", "PUT", "DELETE"]
        allow_headers     = ["content-type", "authorization", "x-canary"]
        expose_headers    = ["x-request-id"]
        max_age           = "10m"
        allow_credentials = true
      }

      # Testers opt into the canary with a header.
      route {
        match {
          path_prefix = "/api/"
          header "x-canary" {
            exact = "1"
          }
        }
        service = "api"
        subset  = "v2"
        timeout = "3s"
        jwt {
          provider = "shop"
        }
      }

      # Everyone else: 90/10 canary split, retried on failure.
      route {
        match {
          path_prefix = "/api/"
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
        timeout = "3s"
        jwt {
          provider = "shop"
        }
        retry {
          attempts        = 3
          per_try_timeout = "1s"
          on              = ["5xx", "connect-failure", "reset"]
        }
      }

      route {
        match {
          path_prefix = "/cart/"
        }
        service = "carts"
        rewrite {
          prefix = "/"
        }
        # Anonymous carts too; a token, if sent, must verify.
        jwt {
          provider      = "shop"
          allow_missing = true
        }
        # Carts are per session: each session its own small bucket.
        rate_limit {
          requests           = 200
          rate_limit_headers = true
          descriptor {
            header   = "x-session-id"
            requests = 5
          }
        }
      }

      route {
        match {
          path = "/healthz"
        }
        direct_response {
          status = 200
          body   = "ok\n"
        }
      }

      route {
        service = "web"
        response_headers {
          set = {
            "strict-transport-security" = "max-age=31536000"
          }
        }
      }
    }

    virtual_host "legacy" {
      domains = ["old.shop.example.com"]
      route {
        redirect {
          host   = "shop.example.com"
          scheme = "https"
          status = 308
        }
      }
    }
  }
}
