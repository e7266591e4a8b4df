proxy "edge" {
  listener "http" {
    port = 8080
    tag_routes {
      format = "traefik"
    }
  }
}
