package policy_test

import (
	"fmt"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// ExampleParse parses and merges one routing policy: a service with
// subsets, a circuit breaker and outlier detection, and an edge proxy group
// that sends beta testers (by header) to the canary, splits the rest 90/10
// with retries, and serves the web front end for everything else.
func ExampleParse() {
	src := `
service "api" {
  connect_timeout = "1s"
  lb_policy       = "least_request"

  subset "stable" {
    tags = ["v1"]
  }
  subset "canary" {
    tags = ["v2"]
    meta = {
      track = "canary"
    }
  }

  circuit_breaker {
    max_connections      = 1024
    max_pending_requests = 256
  }
  outlier_detection {
    consecutive_5xx = 5
    interval        = "10s"
  }
}

proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
      domains = ["shop.example.com", "www.shop.example.com"]

      route {
        match {
          path_prefix = "/api/"
          header "x-beta" {
            exact = "1"
          }
        }
        service = "api"
        subset  = "canary"
      }

      route {
        match {
          path_prefix = "/api/"
        }
        split {
          service = "api"
          subset  = "stable"
          weight  = 90
        }
        split {
          service = "api"
          subset  = "canary"
          weight  = 10
        }
        timeout = "3s"
        retry {
          attempts        = 3
          per_try_timeout = "1s"
          on              = ["5xx", "connect-failure"]
        }
      }

      route {
        service = "web"
      }
    }
  }
}
`
	doc, diags := policy.Parse("edge.hcl", []byte(src))
	if diags.HasErrors() {
		fmt.Println(strings.Join(policy.FormatDiagnostics(diags), "\n"))
		return
	}
	cfg, diags := policy.Merge(doc)
	if diags.HasErrors() {
		fmt.Println(strings.Join(policy.FormatDiagnostics(diags), "\n"))
		return
	}
	pol := cfg.Policy

	for _, s := range pol.Services {
		fmt.Printf("service %s: %s, connect %s, max %d connections, eject after %d 5xx\n",
			s.Name, s.LBPolicy, s.ConnectTimeout, s.CircuitBreaker.MaxConnections, s.OutlierDetection.Consecutive5xx)
		for _, ss := range s.Subsets {
			fmt.Printf("  subset %s.%s: tags %v meta %v\n", s.Name, ss.Name, ss.Tags, ss.Meta)
		}
	}
	for _, l := range pol.ProxyFor("edge").Listeners {
		fmt.Printf("listener edge.%s on %s:%d (%s)\n", l.Name, l.Address, l.Port, l.Protocol)
		for _, vh := range l.VirtualHosts {
			fmt.Printf("  virtual_host %s %v\n", vh.Name, vh.Domains)
			for _, rt := range vh.Routes {
				var to []string
				for _, t := range rt.Targets {
					name := t.Service
					if t.Subset != "" {
						name += "." + t.Subset
					}
					to = append(to, fmt.Sprintf("%s=%d", name, t.Weight))
				}
				line := fmt.Sprintf("    %s prefix %s", rt.Source, rt.Match.PathPrefix)
				for _, h := range rt.Match.Headers {
					line += fmt.Sprintf(" header %s=%s", h.Name, h.Exact)
				}
				line += " -> " + strings.Join(to, " ")
				if rt.Timeout > 0 {
					line += fmt.Sprintf(" timeout %s", rt.Timeout)
				}
				if rt.Retry != nil {
					line += fmt.Sprintf(" retry %dx on %s", rt.Retry.Attempts, strings.Join(rt.Retry.On, ","))
				}
				fmt.Println(line)
			}
		}
	}
	fmt.Println("export all services:", pol.ExportAllServices)
	// Output:
	// service api: least_request, connect 1s, max 1024 connections, eject after 5 5xx
	//   subset api.canary: tags [v2] meta map[track:canary]
	//   subset api.stable: tags [v1] meta map[]
	// listener edge.http on 0.0.0.0:8080 (http)
	//   virtual_host shop [shop.example.com www.shop.example.com]
	//     edge.hcl:32:7 prefix /api/ header x-beta=1 -> api.canary=1
	//     edge.hcl:43:7 prefix /api/ -> api.stable=90 api.canary=10 timeout 3s retry 3x on 5xx,connect-failure
	//     edge.hcl:65:7 prefix / -> web=1
	// export all services: false
}

// ExampleFormatDiagnostics shows what `validate` prints for a policy with a
// mistake: the position of the bad value, what is wrong, and what to do.
func ExampleFormatDiagnostics() {
	doc, diags := policy.Parse("edge.hcl", []byte(`
service "api" {
  lb_policy = "fastest"
}
`))
	if !diags.HasErrors() {
		_, diags = policy.Merge(doc)
	}
	for _, line := range policy.FormatDiagnostics(diags) {
		fmt.Println(line)
	}
	// Output:
	// edge.hcl:3:15: Invalid lb_policy: "fastest" is not one of "round_robin", "least_request", "ring_hash", "random".
}
