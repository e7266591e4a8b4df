proxy "edge" {
  listener "http" {
    port = 8080
    tag_routes {
      format = "traefik"
      # api and web share the shop's host: say so, or only one may route it
      owners = { "shop.example.com" = ["api", "web"] }
    }
  }
}
