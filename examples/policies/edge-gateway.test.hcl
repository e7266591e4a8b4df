# Route tests for edge-gateway.hcl. Run them (no Consul needed) with
#
#   consul-xds-bridge test -catalog examples/policies/edge-gateway.catalog.json \
#     examples/policies/edge-gateway.hcl examples/policies/edge-gateway.test.hcl
#
# Each request is evaluated against the routes the bridge would serve to
# the "edge" proxies, the way Envoy selects a virtual host and route.

route_test "canary header goes to v2" {
  proxy    = "edge"
  listener = "http"
  request {
    host    = "shop.example.com"
    path    = "/api/users"
    method  = "GET"
    headers = { "x-canary" = "1" }
  }
  expect {
    service   = "api"
    subset    = "v2"
    timeout   = "3s"
    endpoints = 1
  }
}

route_test "everyone else gets the 90/10 canary split" {
  proxy    = "edge"
  listener = "http"
  request {
    host = "www.shop.example.com:8080"
    path = "/api/users?page=2"
  }
  expect {
    split    = { "api.v1" = 90, "api.v2" = 10 }
    timeout  = "3s"
    retries  = 3
    retry_on = ["5xx", "connect-failure", "reset"]
  }
}

route_test "another canary value is no canary" {
  proxy    = "edge"
  listener = "http"
  request {
    host    = "shop.example.com"
    path    = "/api/users"
    headers = { "x-canary" = "yes" }
  }
  expect {
    split = { "api.v1" = 90, "api.v2" = 10 }
  }
}

route_test "cart paths lose their prefix upstream" {
  proxy    = "edge"
  listener = "http"
  request {
    host   = "shop.example.com"
    path   = "/cart/items/42?currency=EUR"
    method = "POST"
  }
  expect {
    service           = "carts"
    rewrite_path      = "/items/42?currency=EUR"
    healthy_endpoints = 1
  }
}

route_test "health check answered by the proxy" {
  proxy    = "edge"
  listener = "http"
  request {
    host = "shop.example.com"
    path = "/healthz"
  }
  expect {
    status = 200
    body   = "ok\n"
  }
}

route_test "healthz is an exact path" {
  proxy    = "edge"
  listener = "http"
  request {
    host = "shop.example.com"
    path = "/healthz/deep"
  }
  expect {
    service           = "web"
    endpoints         = 3
    healthy_endpoints = 3
  }
}

route_test "legacy host redirects to https" {
  proxy    = "edge"
  listener = "http"
  request {
    host = "old.shop.example.com"
    path = "/products/7?ref=mail"
  }
  expect {
    virtual_host = "legacy"
    status       = 308
    location     = "https://shop.example.com/products/7?ref=mail"
  }
}

route_test "unknown hosts get no route" {
  proxy    = "edge"
  listener = "http"
  request {
    host = "evil.example.org"
  }
  expect {
    no_route = true
    status   = 404
  }
}

route_test "the storefront's preflight is answered by Envoy" {
  proxy    = "edge"
  listener = "http"
  request {
    host    = "shop.example.com"
    path    = "/api/users"
    method  = "OPTIONS"
    headers = { origin = "https://www.shop.example.com", "access-control-request-method" = "PUT" }
  }
  expect {
    cors_preflight = true
    status         = 200
    cors_headers = {
      "access-control-allow-origin"      = "https://www.shop.example.com"
      "access-control-allow-methods"     = "GET,POST,PUT,DELETE"
      "access-control-allow-credentials" = "true"
      "access-control-max-age"           = "600"
    }
  }
}

route_test "another site's preflight goes upstream without CORS headers" {
  proxy    = "edge"
  listener = "http"
  request {
    host    = "shop.example.com"
    path    = "/api/users"
    method  = "OPTIONS"
    headers = { origin = "https://evil.example.org", "access-control-request-method" = "DELETE" }
  }
  expect {
    cors_preflight = false
    cors_headers   = { "access-control-allow-origin" = "" }
  }
}

route_test "each cart session has its own bucket" {
  proxy    = "edge"
  listener = "http"
  request {
    host    = "shop.example.com"
    path    = "/cart/items"
    headers = { "x-session-id" = "s-42" }
  }
  expect {
    service                = "carts"
    rate_limit             = "route"
    rate_limit_descriptors = ["x-session-id"]
  }
}

route_test "the rest of the shop is under the listener's ceiling" {
  proxy    = "edge"
  listener = "http"
  request {
    host = "shop.example.com"
    path = "/index.html"
  }
  expect {
    service    = "web"
    rate_limit = "listener"
  }
}

route_test "the API requires a shop token" {
  proxy    = "edge"
  listener = "http"
  request {
    host = "shop.example.com"
    path = "/api/orders"
  }
  expect {
    jwt = "required"
  }
}

route_test "carts take anonymous users" {
  proxy    = "edge"
  listener = "http"
  request {
    host = "shop.example.com"
    path = "/cart/items"
  }
  expect {
    service = "carts"
    jwt     = "allow_missing"
  }
}

route_test "the storefront needs no token" {
  proxy    = "edge"
  listener = "http"
  request {
    host = "shop.example.com"
    path = "/index.html"
  }
  expect {
    service = "web"
    jwt     = "none"
  }
}
