package policy

import "time"

// Policy is the routing policy: how Consul services become clusters and, in
// proxy groups, listeners and routes. The zero value (nil Policy) serves one
// EDS cluster per catalog service with the defaults below.
type Policy struct{}

// Defaults the routing policy falls back to.
const (
	DefaultConnectTimeout = 5 * time.Second
)
