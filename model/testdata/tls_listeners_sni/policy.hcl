# TLS terminated at the edge with certificates served over SDS. Paths are
# relative to this file; the served listeners name secrets, never files.
proxy "edge" {
  listener "https" {
    port = 8443
    tls {
      certificate "shop" {
        cert_file = "tls/shop.pem"
        key_file  = "tls/shop-key.pem"
      }
      certificate "blog" {
        cert_file = "tls/blog.pem"
        key_file  = "tls/blog-key.pem"
      }
      default_certificate = "shop"
      min_version         = "1.2"
    }
    # Default certificate; listed by name so blog's chain cannot capture it.
    virtual_host "shop" {
      domains = ["shop.example.com", "*.shop.example.com"]
      route {
        service = "shop"
      }
    }
    # Selected by SNI; the port is not part of the server name.
    virtual_host "blog" {
      domains = ["blog.example.com", "blog.example.com:8443"]
      tls {
        certificate = "blog"
      }
      route {
        service = "blog"
      }
    }
    # Clients without SNI, or asking for any other name: the default.
    virtual_host "fallback" {
      route {
        direct_response {
          status = 404
        }
      }
    }
  }

  # mTLS in front of a TCP service: one certificate, client certificates
  # required, no ALPN by default.
  listener "db" {
    port     = 5433
    protocol = "tcp"
    service  = "postgres"
    tls {
      certificate "internal" {
        cert_file = "tls/internal.pem"
        key_file  = "tls/internal-key.pem"
      }
      min_version    = "1.3"
      client_ca_file = "tls/ca.pem"
    }
  }
}

# A single certificate, no SNI chains; ALPN as configured.
proxy "admin" {
  listener "https" {
    port = 9443
    tls {
      certificate "internal" {
        cert_file = "tls/internal.pem"
        key_file  = "tls/internal-key.pem"
      }
      alpn = ["http/1.1"]
    }
    virtual_host "admin" {
      route {
        service = "shop"
      }
    }
  }
}
