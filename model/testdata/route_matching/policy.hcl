proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      domains = ["*"]
      # Exact path, GET only.
      route {
        match {
          path   = "/healthz"
          method = "GET"
        }
        service = "web"
      }
      # Regex path, case-insensitive.
      route {
        match {
          path_regex     = "^/users/[0-9]+/orders$"
          case_sensitive = false
        }
        service = "api"
      }
      # Header matchers of every kind; names are lower-cased.
      route {
        match {
          path_prefix = "/api/"
          header "X-Env" {
            exact = "beta"
          }
          header "user-agent" {
            prefix = "curl/"
          }
          header "x-tenant" {
            regex = "^t-[a-z]+$"
          }
          header "authorization" {
            present = true
          }
          header "x-internal" {
            exact  = "true"
            invert = true
          }
        }
        service = "beta"
      }
      # Query parameter matchers, and absence of a header.
      route {
        match {
          path_prefix = "/api/"
          method      = "POST"
          query "debug" {
            present = true
          }
          query "version" {
            exact = "2"
          }
          query "lang" {
            prefix = "en"
          }
          query "id" {
            regex = "^[0-9]+$"
          }
          header "x-legacy" {
            present = true
            invert  = true
          }
        }
        service = "beta"
      }
      route {
        match {
          path_prefix    = "/API/"
          case_sensitive = false
        }
        service = "api"
      }
      route {
        match {
          path_prefix = "/"
        }
        service = "web"
      }
    }
  }
}
