proxy "edge" {
  listener "http" {
    port = 80
    virtual_host "old" {
      domains = ["old.example.com"]
      # Everything to the new host, keeping the path; 308 keeps the method.
      route {
        redirect {
          scheme = "https"
          host   = "www.example.com"
          status = 308
        }
      }
    }
    virtual_host "www" {
      domains = ["www.example.com"]
      # Scheme only, default status 301.
      route {
        match {
          path_prefix = "/login"
        }
        redirect {
          scheme = "https"
        }
      }
      # Replace the whole path, drop the query.
      route {
        match {
          path = "/old-page"
        }
        redirect {
          path        = "/new-page"
          status      = 302
          strip_query = true
        }
      }
      # Replace the matched prefix, and the port.
      route {
        match {
          path_prefix = "/docs/"
        }
        redirect {
          prefix = "/documentation/"
          port   = 8443
          status = 307
        }
      }
      route {
        match {
          path = "/robots.txt"
        }
        direct_response {
          status = 200
          body   = "User-agent: *\nDisallow: /admin/\n"
        }
      }
      route {
        match {
          path_prefix = "/admin/"
        }
        direct_response {
          status = 403
        }
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
