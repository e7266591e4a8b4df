service "sessions" {
  lb_policy = "ring_hash"
  hash_policy {
    header   = "x-user-id"
    terminal = true
  }
  hash_policy {
    cookie = "sid"
  }
  hash_policy {
    source_ip = true
  }
}

service "carts" {
  lb_policy = "ring_hash"
  hash_policy {
    source_ip = true
  }
}

proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
      domains = ["*"]
      # Three hash policies in declaration order.
      route {
        match {
          path_prefix = "/sessions/"
        }
        service = "sessions"
      }
      # A weighted route takes the hash policy of its first target.
      route {
        match {
          path_prefix = "/carts/"
        }
        split {
          service = "carts"
          weight  = 80
        }
        split {
          service = "web"
          weight  = 20
        }
      }
      # The hash policy of the first ring_hash target, wherever it is.
      route {
        match {
          path_prefix = "/mixed/"
        }
        split {
          service = "web"
          weight  = 50
        }
        split {
          service = "sessions"
          weight  = 50
        }
      }
      # round_robin target: no hash policy.
      route {
        match {
          path_prefix = "/"
        }
        service = "web"
      }
    }
  }
}
