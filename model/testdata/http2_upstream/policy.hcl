# h2c with an active health check, which must speak HTTP/2 too.
service "grpc-api" {
  http2 = true
  health_check {
    path = "/healthz"
  }
}

# HTTP/2 over TLS: ALPN must offer h2.
service "grpc-secure" {
  http2 = true
  tls {
    sni     = "grpc-secure.internal.example"
    ca_file = "tls/ca.pem"
  }
}

# http2 = false is HTTP/1.1, Envoy's default.
service "rest" {
  http2 = false
}
