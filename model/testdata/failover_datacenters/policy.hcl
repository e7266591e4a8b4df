# Local first (priority 0), then dc2 (1), then dc3 (2); subsets select
# in every tier.
service "api" {
  subset "v2" {
    tags = ["v2"]
  }
  failover {
    datacenters = ["dc2", "dc3"]
  }
}

# No local instance: dc2 and dc3 are the only tiers, so they become
# priorities 0 and 1 (Envoy's priorities must not have gaps).
service "reports" {
  failover {
    datacenters = ["dc2", "dc3"]
  }
}

# web is not set to fail over: dc2's instance is not used, and no cluster
# is made for a remote datacenter's service.
service "web" {
  lb_policy = "round_robin"
}
