package policy

import "github.com/hashicorp/hcl/v2"

// The raw HTTP-feature blocks (http_features.go resolves them): each maps
// onto one Envoy HTTP filter or route setting.

// corsBlock is `cors` in a virtual_host or route: Envoy's CorsPolicy. A
// route's block inherits what it leaves out from its virtual host's.
type corsBlock struct {
	AllowOrigins     []string       `hcl:"allow_origins,optional"`
	AllowOriginRegex []string       `hcl:"allow_origin_regex,optional"`
	AllowMethods     []string       `hcl:"allow_methods,optional"`
	AllowHeaders     []string       `hcl:"allow_headers,optional"`
	ExposeHeaders    []string       `hcl:"expose_headers,optional"`
	MaxAge           hcl.Expression `hcl:"max_age,optional"`
	AllowCredentials *bool          `hcl:"allow_credentials,optional"`
	Body             hcl.Body       `hcl:",body"`
	DefRange         hcl.Range      `hcl:",def_range"`
}
