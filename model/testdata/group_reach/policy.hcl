# What each group may see: two sidecar groups routing to disjoint
# services, a group with upstreams only, an edge that fronts everything,
# and a proxyless group narrowed to two targets. billing's client key goes
# only to the groups whose clusters use billing.
unmatched_nodes = "all"

service "billing" {
  tls {
    sni       = "billing.internal.example"
    ca_file   = "tls/ca.pem"
    cert_file = "tls/client.pem"
    key_file  = "tls/client-key.pem"
  }
  subset "v2" {
    tags = ["v2"]
  }
}

service "web" {}
service "api" {}
service "audit" {}

proxy "shop" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        match {
          path_prefix = "/pay/"
        }
        split {
          service = "billing"
          weight  = 90
        }
        split {
          service = "billing"
          subset  = "v2"
          weight  = 10
        }
        mirror {
          service = "audit"
        }
      }
    }
  }
}

proxy "web" {
  upstreams = ["api"]
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        service = "web"
      }
    }
  }
  listener "db" {
    port     = 5432
    protocol = "tcp"
    service  = "api"
  }
}

proxy "batch" {
  upstreams = ["audit"]
}

proxy "edge" {
  export_all_services = true
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        service = "web"
      }
    }
  }
}

proxy "grpc-web" {
  proxyless = true
  upstreams = ["web", "api"]
}
