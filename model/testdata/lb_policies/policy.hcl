# connect_timeout and lb_policy per service; web keeps the defaults
# (5s, round_robin).
service "api" {
  connect_timeout = "250ms"
  lb_policy       = "least_request"
}

service "search" {
  connect_timeout = "2s"
  lb_policy       = "random"
}

service "web" {
  lb_policy = "round_robin"
}
