package main

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const cmdTestPolicy = `service "api" {
  subset "v2" {
    tags = ["v2"]
  }
}

proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "shop" {
      domains = ["shop.example.com"]
      route {
        match {
          path_prefix = "/api/"
          header "x-canary" {
            exact = "1"
          }
        }
        service = "api"
        subset  = "v2"
        timeout = "3s"
      }
      route {
        service = "web"
      }
    }
  }
}
`

const cmdPassingTests = `route_test "canary header goes to v2" {
  proxy    = "edge"
  listener = "http"
  request {
    host    = "shop.example.com"
    path    = "/api/users"
    method  = "GET"
    headers = { "x-canary" = "1" }
  }
  expect {
    service   = "api"
    subset    = "v2"
    timeout   = "3s"
    endpoints = 1
  }
}

route_test "the rest goes to web" {
  proxy = "edge"
  request {
    host = "shop.example.com"
    path = "/api/users"
  }
  expect {
    service = "web"
  }
}
`

const cmdFailingTests = `route_test "canary header goes to v2" {
  proxy = "edge"
  request {
    host    = "shop.example.com"
    path    = "/api/users"
    headers = { "x-canary" = "1" }
  }
  expect {
    service = "api"
    timeout = "5s"
  }
}
`

const cmdCatalog = `{"services": {"api": [
  {"Node": {"Node": "n1", "Address": "10.0.0.1"}, "Service": {"ID": "api-1", "Port": 80, "Tags": ["v2"]}, "Checks": []}
]}}`

func TestTestCommand(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
	pol := write("policy.hcl", cmdTestPolicy)
	pass := write("pass.test.hcl", cmdPassingTests)
	fail := write("fail.test.hcl", cmdFailingTests)
	cat := write("catalog.json", cmdCatalog)
	bad := write("bad.test.hcl", "route_test \"x\" {\n  proxy = \"edge\"\n  request {\n    host = \"a\"\n  }\n  expect {\n    servce = \"api\"\n  }\n}\n")
	inline := write("inline.hcl", cmdTestPolicy+"\n"+cmdFailingTests)

	tests := map[string]cliCase{
		"passing": {
			args:     []string{"test", "-catalog", cat, pol, pass},
			wantCode: 0,
			wantOut: []string{
				"PASS " + pass + `:1:1: canary header goes to v2 -> route ` + pol + `:12:7 in virtual host "shop": cluster "api.v2"`,
				"PASS " + pass + `:18:1: the rest goes to web -> route ` + pol + `:23:7 in virtual host "shop": cluster "web"`,
				"2 passed, 0 failed",
			},
		},
		"flags after files": {
			args:     []string{"test", pol, pass, "-catalog", cat, "-run", "rest"},
			wantCode: 0,
			wantOut:  []string{"PASS " + pass + ":18:1: the rest goes to web", "1 passed, 0 failed"},
		},
		"failing": {
			args:     []string{"test", pol, fail},
			wantCode: 1,
			wantOut: []string{
				"FAIL " + fail + `:1:1: canary header goes to v2 -> route ` + pol + `:12:7 in virtual host "shop": cluster "api.v2"`,
				"  " + fail + `:9:5: service: expected cluster "api", got cluster "api.v2"; matched route ` + pol + ":12:7",
				"  " + fail + `:10:5: timeout: expected 5s, got 3s; matched route ` + pol + ":12:7",
				"0 passed, 1 failed",
			},
		},
		"tests in the policy file": {
			args:     []string{"test", inline},
			wantCode: 1,
			wantOut:  []string{"FAIL " + inline + ":30:1: canary header goes to v2 -> route " + inline + ":12:7", "0 passed, 1 failed"},
		},
		"endpoints need a catalog": {
			args:     []string{"test", pol, pass},
			wantCode: 1,
			wantErr:  []string{pass + ":14:5: Catalog fixture needed"},
		},
		"invalid test file": {
			args:     []string{"test", pol, bad},
			wantCode: 1,
			wantErr:  []string{bad + `:7:5: Unsupported argument: An argument named "servce" is not expected here. Did you mean "service"?`},
		},
		"no tests": {
			args:     []string{"test", pol},
			wantCode: 1,
			wantErr:  []string{"test: no route_test blocks in " + pol},
		},
		"no test matches -run": {
			args:     []string{"test", "-run", "nothing", pol, pass},
			wantCode: 1,
			wantErr:  []string{`test: no route test matches -run "nothing"`},
		},
		"missing catalog": {
			args:     []string{"test", "-catalog", filepath.Join(dir, "nope.json"), pol, pass},
			wantCode: 1,
			wantErr:  []string{"nope.json"},
		},
		"no files": {
			args:     []string{"test"},
			wantCode: 2,
			wantErr:  []string{"test: name the policy files"},
		},
		"validate accepts route tests": {
			args:     []string{"validate", pol, pass, fail},
			wantCode: 0,
			wantOut:  []string{"3 file(s) valid"},
		},
	}
	for name, tc := range tests {
		t.Run(name, tc.run)
	}
}

// cliCase is one command line and what it must answer: the exit code,
// lines of stdout starting with each of wantOut, stderr containing each
// of wantErr.
type cliCase struct {
	args     []string
	wantCode int
	wantOut  []string
	wantErr  []string
}

func (tc cliCase) run(t *testing.T) {
	var out, errOut bytes.Buffer
	code := realMain(tc.args, &out, &errOut)
	if code != tc.wantCode {
		t.Errorf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, tc.wantCode, out.String(), errOut.String())
	}
	lines := strings.Split(out.String(), "\n")
	for _, w := range tc.wantOut {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, w) }) {
			t.Errorf("stdout lacks a line starting %q:\n%s", w, out.String())
		}
	}
	for _, w := range tc.wantErr {
		if !strings.Contains(errOut.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, errOut.String())
		}
	}
}
