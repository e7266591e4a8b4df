# Proxyless gRPC clients: grpc_service blocks route xds:///NAME; every other
# service cluster gets a default API listener (web here).
service "echo" {
  subset "v1" {
    tags = ["v1"]
  }
  subset "v2" {
    tags = ["v2"]
  }
}

service "sessions" {
  lb_policy = "ring_hash"
  hash_policy {
    header = "x-user-id"
  }
}

# Nodes of this group get the API listeners whatever their user agent.
proxy "grpc-*" {
  proxyless = true
}

# Envoys keep their own listeners; they never get API listeners.
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        service = "web"
      }
    }
  }
}

grpc_service "echo" {
  # Canary calls (header) go to v2, with a short deadline and retries.
  route {
    match {
      header "x-canary" {
        exact = "1"
      }
    }
    service = "echo"
    subset  = "v2"
    timeout = "2s"
    retry {
      attempts = 2
    }
  }
  # One method, matched exactly, gets faults injected.
  route {
    match {
      path = "/echo.Echo/Flaky"
    }
    service = "echo"
    fault {
      delay {
        duration = "100ms"
        percent  = 10
      }
      abort {
        status  = 503
        percent = 1
      }
    }
  }
  # Everything else: a weighted split, no deadline.
  route {
    match {
      path_prefix = "/echo.Echo/"
    }
    split {
      service = "echo"
      subset  = "v1"
      weight  = 80
    }
    split {
      service = "echo"
      subset  = "v2"
      weight  = 20
    }
    timeout = "0s"
    retry {
      attempts = 3
      on       = ["unavailable", "resource-exhausted"]
    }
  }
}

# A name that is not a service, hashing on a header.
grpc_service "sessions.internal:50061" {
  route {
    match {
      path_prefix    = "/sessions."
      case_sensitive = false
    }
    service = "sessions"
  }
}
