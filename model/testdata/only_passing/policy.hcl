# payments: a warning instance gets no traffic.
service "payments" {
  only_passing = true
}

# ledger: Consul's default, warning is healthy at the warning weight.
service "ledger" {
  only_passing = false
}
