package routetest

import (
	"fmt"
	"io"
)

// Report writes one line per test, and under a failed test one line per
// failed expectation, each starting with the file:line:col it is about:
//
//	PASS edge.test.hcl:1:1: canary header goes to v2 -> route edge.hcl:56:7 in virtual host "shop": cluster "api.v2"
//	FAIL edge.test.hcl:20:1: the rest is split -> route edge.hcl:68:7 in virtual host "shop": split {"api.v1" = 90, "api.v2" = 10}
//	  edge.test.hcl:31:5: split: expected {"api.v1" = 80, "api.v2" = 20}, got split {"api.v1" = 90, "api.v2" = 10}; matched route edge.hcl:68:7
//
// and a summary line. It returns the number of failed tests.
func Report(w io.Writer, results []*Result) (failed int) {
	for _, r := range results {
		verdict := "PASS"
		if !r.Passed() {
			verdict = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "%s %s: %s -> %s\n", verdict, pos(r.Test.Range), r.Test.Name, r.matched())
		for _, f := range r.Failures {
			suffix := ""
			if r.Route != "" {
				suffix = "; matched route " + r.Route
			}
			fmt.Fprintf(w, "  %s: %s%s\n", pos(f.Subject), f.Message, suffix)
		}
	}
	fmt.Fprintf(w, "%d passed, %d failed\n", len(results)-failed, failed)
	return failed
}

// matched says where the request went.
func (r *Result) matched() string {
	switch {
	case r.RouteConfig == "":
		return r.Got
	case r.VirtualHost == "":
		return fmt.Sprintf("%s in route configuration %q", r.Got, r.RouteConfig)
	case r.Route == "":
		return fmt.Sprintf("%s in virtual host %q", r.Got, r.VirtualHost)
	}
	return fmt.Sprintf("route %s in virtual host %q: %s", r.Route, r.VirtualHost, r.Got)
}
