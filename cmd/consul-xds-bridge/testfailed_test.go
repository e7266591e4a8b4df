package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestCommandRefusesAnUntranslatableGroup: route tests of a policy
// whose group cannot be translated (a header value Envoy refuses) crashed
// the command (a nil group's routes); the bridge would refuse the policy,
// so `test` does too: exit 1, the reason at the place, no test run.
func TestTestCommandRefusesAnUntranslatableGroup(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.hcl")
	src := `proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        match {
          path_prefix = "/admin/"
        }
        direct_response {
          status = 403
        }
        request_headers {
          set = { "x-a" = "a\nb" }
        }
      }
    }
  }
}
route_test "admin is closed" {
  proxy = "edge"
  request {
    host = "x"
    path = "/admin/x"
  }
  expect {
    status = 403
  }
}
`
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := realMain([]string{"test", file}, &out, &errOut)
	if code != 1 || !strings.Contains(out.String()+errOut.String(), `Proxy group "edge" cannot be translated`) {
		t.Fatalf("test of an untranslatable group: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}
