# Upstream TLS: the bridge reads these files (relative to this file) and
# serves them as SDS secrets; clusters name the secrets.

# mTLS: client certificate, CA, and the name to expect.
service "billing" {
  tls {
    sni       = "billing.internal.example"
    ca_file   = "tls/ca.pem"
    cert_file = "tls/client.pem"
    key_file  = "tls/client-key.pem"
  }
  subset "v2" {
    tags = ["v2"]
  }
}

# Server-authenticated TLS without a client certificate.
service "partner" {
  tls {
    sni     = "api.partner.example"
    ca_file = "tls/ca.pem"
  }
}

# A CA without an SNI: the chain is verified, no name is sent or checked.
service "legacy" {
  tls {
    ca_file = "tls/ca.pem"
  }
}
