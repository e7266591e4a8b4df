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
  route {
    service = "api"
  }
}

# db is a tcp upstream: its mesh_routes are ignored, with a warning.
mesh_routes "db" {
  route {
    service = "db"
  }
}
