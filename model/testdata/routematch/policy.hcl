# The route table of routematch's tests (routematch/match_test.go reads
# this case's ../../xds/testdata/routematch/rds.golden.json): every kind of
# virtual host domain, path, header, method and query match, in an order
# where first-match-wins matters.

service "api" {
  subset "v2" {
    tags = ["v2"]
  }
}

proxy "edge" {
  listener "http" {
    port = 8080

    virtual_host "exact" {
      domains = ["shop.example.com"]
      route {
        match {
          path = "/healthz"
        }
        direct_response {
          status = 200
        }
      }
      route {
        match {
          path_prefix = "/api/"
          header "x-canary" {
            exact = "1"
          }
        }
        service = "api"
        subset  = "v2"
      }
      route {
        match {
          path_prefix = "/api/"
          header "x-debug" {
            present = true
            invert  = true
          }
          method = "GET"
        }
        service = "api"
      }
      route {
        match {
          path_prefix = "/API/"
        }
        service = "api-upper"
      }
      route {
        match {
          path_prefix    = "/docs/"
          case_sensitive = false
        }
        service = "docs"
      }
      route {
        match {
          path_regex = "/items/[0-9]+"
        }
        service = "items"
      }
      route {
        match {
          path_prefix = "/search"
          query "q" {
            prefix = "go"
          }
        }
        service = "search-go"
      }
      route {
        match {
          path_prefix = "/search"
          query "debug" {
            present = true
          }
        }
        service = "search-debug"
      }
      route {
        match {
          path_prefix = "/ua"
          header "user-agent" {
            regex = "curl/.*"
          }
        }
        service = "curl"
      }
      route {
        service = "web"
      }
    }

    virtual_host "suffix" {
      domains = ["*.example.com"]
      route {
        service = "suffix"
      }
    }

    virtual_host "longer-suffix" {
      domains = ["*.eu.example.com"]
      route {
        service = "eu"
      }
    }

    virtual_host "prefix" {
      domains = ["shop.*"]
      route {
        service = "prefix"
      }
    }

    virtual_host "default" {
      domains = ["*"]
      route {
        match {
          path_prefix = "/"
        }
        redirect {
          host = "shop.example.com"
        }
      }
    }
  }
}
