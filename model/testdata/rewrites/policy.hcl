proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      domains = ["*"]
      # /api/v1/x -> /x
      route {
        match {
          path_prefix = "/api/v1/"
        }
        service = "api"
        rewrite {
          prefix = "/"
        }
      }
      # /users/42/profile -> /profile?user=42 style rewrite by regex.
      route {
        match {
          path_regex = "^/users/([0-9]+)/profile$"
        }
        service = "legacy"
        rewrite {
          regex        = "^/users/([0-9]+)/profile$"
          substitution = "/profile/\\1"
        }
      }
      # Host only.
      route {
        match {
          path_prefix = "/assets/"
        }
        service = "static"
        rewrite {
          host = "static.internal.example"
        }
      }
      # Prefix and host together.
      route {
        match {
          path_prefix = "/old/"
        }
        service = "legacy"
        rewrite {
          prefix = "/new/"
          host   = "legacy.internal.example"
        }
      }
    }
  }
}
