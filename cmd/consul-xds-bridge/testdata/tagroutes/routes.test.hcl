route_test "api paths go to api, without their prefix" {
  proxy    = "edge"
  listener = "http"
  request {
    host = "shop.example.com"
    path = "/api/users"
  }
  expect {
    service   = "api"
    rewrite_path = "/users"
    endpoints = 1
  }
}

route_test "the rest of the shop goes to web" {
  proxy    = "edge"
  listener = "http"
  request {
    host = "shop.example.com"
    path = "/index.html"
  }
  expect {
    service = "web"
  }
}
