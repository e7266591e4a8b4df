package bridge

import (
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

func TestHostRule(t *testing.T) {
	loop := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 19100}
	wild := &net.TCPAddr{IP: net.IPv4zero, Port: 19100}
	lan := &net.TCPAddr{IP: net.ParseIP("10.0.0.5"), Port: 19100}
	unix := &net.UnixAddr{Name: "/run/admin.sock", Net: "unix"}
	cases := map[string]struct {
		addr  net.Addr
		names []string
		host  string
		want  bool
	}{
		"loopback by address":           {loop, nil, "127.0.0.1:19100", true},
		"loopback as localhost":         {loop, nil, "localhost:19100", true},
		"loopback as ::1":               {loop, nil, "[::1]:19100", true},
		"through an SSH tunnel":         {lan, nil, "localhost:8080", true},
		"no port":                       {loop, nil, "127.0.0.1", true},
		"rebinding name":                {loop, nil, "evil.example:19100", false},
		"rebinding name without port":   {loop, nil, "evil.example", false},
		"name ending in an IP":          {loop, nil, "127.0.0.1.nip.io:19100", false},
		"localhost subdomain":           {loop, nil, "localhost.evil.example:19100", false},
		"empty":                         {loop, nil, "", false},
		"lan address":                   {lan, nil, "10.0.0.5:19100", true},
		"wildcard, any IP":              {wild, nil, "192.168.1.9:19100", true},
		"wildcard, a name":              {wild, nil, "bridge.internal:19100", false},
		"configured name":               {wild, []string{"bridge.internal"}, "bridge.internal:19100", true},
		"configured name, any port":     {wild, []string{"bridge.internal"}, "bridge.internal", true},
		"configured name, case":         {wild, []string{"bridge.internal"}, "Bridge.Internal.:19100", true},
		"configured name, suffix trick": {wild, []string{"bridge.internal"}, "bridge.internal.evil.example:19100", false},
		"configured name, prefix trick": {wild, []string{"bridge.internal"}, "evilbridge.internal:19100", false},
		"unix socket, any host":         {unix, nil, "admin.sock", true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := newHostRule(tc.addr, tc.names).allows(tc.host); got != tc.want {
				t.Errorf("allows(%q) = %v, want %v", tc.host, got, tc.want)
			}
		})
	}
}

func TestCrossSite(t *testing.T) {
	cases := map[string]struct {
		ct, origin, site string
		refused          bool
	}{
		"JSON, no Origin (CLI, curl)":     {"application/json", "", "", false},
		"JSON with charset":               {"application/json; charset=utf-8", "", "", false},
		"JSON, same origin":               {"application/json", "http://127.0.0.1:19100", "same-origin", false},
		"text/plain":                      {"text/plain;charset=UTF-8", "", "", true},
		"form":                            {"application/x-www-form-urlencoded", "", "", true},
		"multipart":                       {"multipart/form-data; boundary=x", "", "", true},
		"no content type":                 {"", "", "", true},
		"JSON, other origin":              {"application/json", "http://evil.example", "", true},
		"JSON, origin null":               {"application/json", "null", "", true},
		"JSON, same host other scheme ok": {"application/json", "https://127.0.0.1:19100", "", false},
		"JSON, cross-site fetch":          {"application/json", "", "cross-site", true},
		"JSON, same-site fetch":           {"application/json", "", "same-site", true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "http://127.0.0.1:19100/v1/plan", strings.NewReader("{}"))
			for k, v := range map[string]string{"Content-Type": tc.ct, "Origin": tc.origin, "Sec-Fetch-Site": tc.site} {
				if v != "" {
					r.Header.Set(k, v)
				}
			}
			if why := crossSite(r); (why != "") != tc.refused {
				t.Errorf("crossSite = %q, want refused=%v", why, tc.refused)
			}
		})
	}
}

// TestAdminTokenFileIsBounded: a token file swapped for a FIFO (no
// writer) or a device is refused at once with the path and why, not
// waited on or read without end.
func TestAdminTokenFileIsBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	for _, path := range []string{fifo, "/dev/zero"} {
		start := time.Now()
		_, err := adminToken(path, false)
		if err == nil || !strings.Contains(err.Error(), path) || !errors.Is(err, policy.ErrNotRegularFile) {
			t.Errorf("adminToken(%s) = %v, want a not-a-regular-file error naming it", path, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("adminToken(%s) took %v", path, took)
		}
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, maxTokenFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := adminToken(big, false); !errors.Is(err, policy.ErrFileTooLarge) {
		t.Errorf("adminToken(a %d-byte file) = %v, want too large", maxTokenFileBytes+1, err)
	}
	// A missing generated token is still created.
	gen := filepath.Join(dir, "admin-token")
	if tok, err := adminToken(gen, true); err != nil || len(tok) < 32 {
		t.Errorf("generated token = %q, %v", tok, err)
	}
}
