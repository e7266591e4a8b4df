mesh {}

service "api" {
  connect_timeout = "2s"
}

proxy "web-envoys" {
  sidecar_for = "web"
}
