# mTLS: client certificate, CA, and the name to expect.
service "billing" {
  tls {
    sni       = "billing.internal.example"
    ca_file   = "/etc/envoy/tls/ca.pem"
    cert_file = "/etc/envoy/tls/client.pem"
    key_file  = "/etc/envoy/tls/client-key.pem"
  }
}

# Server-authenticated TLS without a client certificate.
service "partner" {
  tls {
    sni     = "api.partner.example"
    ca_file = "/etc/ssl/certs/ca-certificates.crt"
  }
}

# A CA without an SNI: the chain is verified, no name is sent or checked.
service "legacy" {
  tls {
    ca_file = "/etc/envoy/tls/legacy-ca.pem"
  }
}
