# Zone aware routing: web's sidecars prefer api instances in their own
# zone, weighed by how web itself is spread over zones (the bootstrap's
# local cluster: bootstrap -local-service web -region dc1 -zone ZONE).
service "api" {
  zone_aware {
    min_cluster_size = 2
    routing_percent  = 90
  }
}

proxy "web-sidecar" {
  local_service = "web"
  listener "out" {
    address = "127.0.0.1"
    port    = 9001
    virtual_host "api" {
      route {
        service = "api"
      }
    }
  }
}
