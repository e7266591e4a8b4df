# consul-config:service-defaults/api,service-resolver/api
service "api" {
  connect_timeout = "3s"
  lb_policy       = "ring_hash"
  hash_policy {
    header = "x-user"
  }
  hash_policy {
    source_ip = true
    terminal  = true
  }
  only_passing = true
  subset "v1" {
    meta = {
      version = "v1"
    }
  }
  subset "v2" {
    tags = ["v2"]
    meta = {
      track = "canary"
    }
  }
  failover {
    datacenters = ["dc2", "dc3"]
  }
}

# consul-config:service-defaults/billing
service "billing" {
}

# consul-config:service-defaults/echo,service-resolver/echo
service "echo" {
  http2 = true
  subset "canary" {
    tags = ["canary"]
  }
}

# consul-config:ingress-gateway/edge
proxy "edge" {
  listener "port-8080" {
    port = 8080
    virtual_host "api" {
      domains = ["api.example.com"]
      route {
        match {
          path_prefix = "/billing/"
          method      = "GET"
        }
        service = "billing"
        chain   = false
        timeout = "2s"
        retry {
          attempts = 3
          on       = ["connect-failure"]
        }
        rewrite {
          prefix = "/"
        }
      }
      route {
        match {
          path_prefix = "/billing/"
          method      = "POST"
        }
        service = "billing"
        chain   = false
        timeout = "2s"
        retry {
          attempts = 3
          on       = ["connect-failure"]
        }
        rewrite {
          prefix = "/"
        }
      }
      route {
        match {
          path = "/canary"
          header "x-debug" {
            present = true
          }
          header "x-env" {
            regex  = ".*\\.test"
            invert = true
          }
          query "v" {
            exact = "2"
          }
        }
        service = "api"
        subset  = "v2"
        chain   = false
        request_headers {
          set = {
            x-routed = "canary"
          }
        }
      }
      route {
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
        chain = false
      }
    }
    virtual_host "billing" {
      domains = ["billing.ingress.*"]
      route {
        service = "billing"
        chain   = false
      }
    }
  }
  listener "port-5432" {
    port     = 5432
    protocol = "tcp"
    service  = "db"
  }
}

# consul-config:api-gateway/public,http-route/any-host,http-route/shop-routes,tcp-route/pg
proxy "public" {
  listener "http" {
    port = 9080
    virtual_host "any-host" {
      domains = ["*.example.com"]
      route {
        match {
          path = "/health"
        }
        service = "billing"
      }
    }
    virtual_host "shop-routes" {
      domains = ["shop.example.com"]
      route {
        match {
          path_prefix = "/api/"
          method      = "GET"
          header "x-env" {
            regex = ".*\\.prod"
          }
          query "debug" {
            present = true
          }
        }
        split {
          service = "api"
          weight  = 80
        }
        split {
          service = "billing"
          weight  = 20
        }
        timeout = "5s"
        retry {
          attempts = 2
          on       = ["connect-failure"]
        }
        rewrite {
          prefix = "/"
        }
        request_headers {
          set = {
            x-gw = "public"
          }
        }
      }
      route {
        service = "billing"
      }
    }
  }
  listener "pg" {
    port     = 6432
    protocol = "tcp"
    service  = "db"
  }
}

# consul-config:service-router/api,service-splitter/api
chain "api" {
  route {
    match {
      path_prefix = "/billing/"
      method      = "GET"
    }
    service = "billing"
    timeout = "2s"
    retry {
      attempts = 3
      on       = ["connect-failure"]
    }
    rewrite {
      prefix = "/"
    }
  }
  route {
    match {
      path_prefix = "/billing/"
      method      = "POST"
    }
    service = "billing"
    timeout = "2s"
    retry {
      attempts = 3
      on       = ["connect-failure"]
    }
    rewrite {
      prefix = "/"
    }
  }
  route {
    match {
      path = "/canary"
      header "x-debug" {
        present = true
      }
      header "x-env" {
        regex  = ".*\\.test"
        invert = true
      }
      query "v" {
        exact = "2"
      }
    }
    service = "api"
    subset  = "v2"
    request_headers {
      set = {
        x-routed = "canary"
      }
    }
  }
  route {
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

# consul-config:service-router/echo,service-splitter/echo
chain "echo" {
  route {
    match {
      path_prefix = "/echo.Echo/Slow"
      header "x-tier" {
        exact = "gold"
      }
    }
    split {
      service = "echo"
      weight  = 75
    }
    split {
      service = "echo"
      subset  = "canary"
      weight  = 25
    }
    timeout = "500ms"
    retry {
      attempts = 2
      on       = ["unavailable", "5xx"]
    }
  }
  route {
    split {
      service = "echo"
      weight  = 75
    }
    split {
      service = "echo"
      subset  = "canary"
      weight  = 25
    }
  }
}
grpc_service "echo" {
  route {
    match {
      path_prefix = "/echo.Echo/Slow"
      header "x-tier" {
        exact = "gold"
      }
    }
    split {
      service = "echo"
      weight  = 75
    }
    split {
      service = "echo"
      subset  = "canary"
      weight  = 25
    }
    timeout = "500ms"
    retry {
      attempts = 2
      on       = ["unavailable"]
    }
  }
  route {
    split {
      service = "echo"
      weight  = 75
    }
    split {
      service = "echo"
      subset  = "canary"
      weight  = 25
    }
  }
}

