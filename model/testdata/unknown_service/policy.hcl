proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      domains = ["*"]
      # "payments" is not registered (yet): its cluster exists with no
      # endpoints (Envoy answers 503), and Build warns.
      route {
        match {
          path_prefix = "/pay/"
        }
        service = "payments"
      }
      route {
        match {
          path_prefix = "/"
        }
        service = "web"
      }
    }
  }
}
