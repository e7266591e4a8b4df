mesh {}

service "api" {
  connect_timeout = "2s"
}

# web's and admin's sidecars split their upstream api 80/20 between api
# and api-canary (which no sidecar dials directly), with a timeout and
# retries on /v2, and send the rest to api.
mesh_routes "api" {
  route {
    match {
      path_prefix = "/v2"
    }
    split {
      service = "api"
      weight  = 80
    }
    split {
      service = "api-canary"
      weight  = 20
    }
    timeout = "2s"
    retry {
      attempts = 2
      on       = ["5xx"]
    }
  }
  # Answered by web's own sidecar: no target, no cluster.
  route {
    match {
      path = "/ping"
    }
    direct_response {
      status = 200
      body   = "pong"
    }
  }
  route {
    service = "api"
    request_headers {
      set = { "x-via" = "mesh" }
    }
  }
}

# db is a tcp upstream: mesh_routes that match requests are ignored, with
# a warning (one route to one target, what a resolver alone makes, is
# where a tcp upstream goes, as in Consul).
mesh_routes "db" {
  route {
    match {
      path_prefix = "/v2"
    }
    service = "db"
  }
  route {
    service = "db"
  }
}
