# What every gRPC implementation parses (issue 15): the same header
# matches and splits for an Envoy group and for gRPC clients. Envoy routes
# keep string_match and the declared weights; gRPC routes get
# HeaderMatcher's original fields (C-core before 1.56 NACKs string_match)
# and weights scaled to sum to 100 (C-core before total_weight's
# deprecation NACKs any other sum).
service "echo" {
  subset "v1" {
    tags = ["v1"]
  }
  subset "v2" {
    tags = ["v2"]
  }
  subset "v3" {
    tags = ["v3"]
  }
}

proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        match {
          header "x-tier" {
            prefix = "gold"
          }
        }
        split {
          service = "echo"
          subset  = "v1"
          weight  = 4
        }
        split {
          service = "echo"
          subset  = "v2"
          weight  = 1
        }
      }
      route {
        service = "echo"
      }
    }
  }
}

grpc_service "echo" {
  # Every kind of header match: exact, prefix, regex, present, inverted.
  route {
    match {
      header "x-canary" {
        exact = "1"
      }
      header "x-tier" {
        prefix = "gold"
      }
      header "x-client" {
        regex = "^mobile-[0-9]+$"
      }
      header "x-trace" {
        present = true
      }
      header "x-internal" {
        exact  = "yes"
        invert = true
      }
    }
    service = "echo"
    subset  = "v3"
  }
  # 4/1 (the split C-core NACKed): 80/20.
  route {
    match {
      header "x-tier" {
        prefix = "gold"
      }
    }
    split {
      service = "echo"
      subset  = "v1"
      weight  = 4
    }
    split {
      service = "echo"
      subset  = "v2"
      weight  = 1
    }
  }
  # 1/1/1: 34/33/33, the point left over to the first.
  route {
    match {
      path_prefix = "/echo.Echo/Three"
    }
    split {
      service = "echo"
      subset  = "v1"
      weight  = 1
    }
    split {
      service = "echo"
      subset  = "v2"
      weight  = 1
    }
    split {
      service = "echo"
      subset  = "v3"
      weight  = 1
    }
  }
  # 999/1: the small share keeps 1 (99/1), it does not round to 0.
  route {
    split {
      service = "echo"
      subset  = "v1"
      weight  = 999
    }
    split {
      service = "echo"
      subset  = "v3"
      weight  = 1
    }
  }
}
