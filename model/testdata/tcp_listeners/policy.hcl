service "postgres" {
  connect_timeout = "1s"
  subset "primary" {
    tags = ["primary"]
  }
}

proxy "db-gateway" {
  # One service (subset), with an idle timeout.
  listener "postgres" {
    protocol     = "tcp"
    port         = 5432
    service      = "postgres"
    subset       = "primary"
    idle_timeout = "1h"
  }
  # Weighted services.
  listener "redis" {
    protocol = "tcp"
    address  = "127.0.0.1"
    port     = 6379
    split {
      service = "redis"
      weight  = 90
    }
    split {
      service = "redis-next"
      weight  = 10
    }
  }
}
