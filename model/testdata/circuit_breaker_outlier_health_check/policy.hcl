# Every setting spelled out.
service "orders" {
  circuit_breaker {
    max_connections      = 1024
    max_pending_requests = 256
    max_requests         = 2048
    max_retries          = 3
  }
  outlier_detection {
    consecutive_5xx      = 7
    interval             = "5s"
    base_ejection_time   = "1m"
    max_ejection_percent = 50
  }
  health_check {
    path                = "/healthz"
    host                = "orders.internal"
    interval            = "3s"
    timeout             = "500ms"
    healthy_threshold   = 1
    unhealthy_threshold = 5
  }
}

# Blocks with defaults only; the circuit breaker sets one threshold and
# leaves Envoy's defaults for the others.
service "inventory" {
  circuit_breaker {
    max_connections = 100
  }
  outlier_detection {
  }
  health_check {
  }
}
