package ir

import "strings"

// ProxylessClusterPrefix starts the name of the copy of a cluster that
// proxyless gRPC clients get instead of the Envoys' cluster when that one
// has what some gRPC implementation rejects: a service balanced
// least_request (grpc-node and C-core NACK lb_policy LEAST_REQUEST) is
// served to them as "grpc:SERVICE", with the same endpoints, lb_policy
// ROUND_ROBIN and gRFC A52's load_balancing_policy list [least_request,
// round_robin]: a client that reads the list takes the first policy it
// implements, one that does not (C-core before 1.55) reads lb_policy.
// ":" cannot be in a service or subset name, so it cannot clash.
const ProxylessClusterPrefix = "grpc:"

// IsProxylessCopy reports whether name is a proxyless clients' copy of
// a cluster (ProxylessClusterPrefix).
func IsProxylessCopy(name string) bool { return strings.HasPrefix(name, ProxylessClusterPrefix) }
