package main

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// xdsAddress reads one -xds value. Operators paste addresses in the forms
// they see elsewhere: HOST:PORT, a URL (http://HOST:PORT,
// https://HOST:PORT, grpc://, grpcs://, tcp://), gRPC's dns:///HOST:PORT
// or unix:///PATH. It returns HOST:PORT, or a Unix socket path, and
// whether the scheme asks for TLS (https, grpcs).
func xdsAddress(v string) (hostPort, unixPath string, tls bool, err error) {
	if !strings.Contains(v, "://") && !strings.HasPrefix(v, "unix:") {
		return checkHostPort(v, v)
	}
	u, err := url.Parse(v)
	if err != nil {
		return "", "", false, fmt.Errorf("-xds %q: want HOST:PORT or SCHEME://HOST:PORT (%v)", v, err)
	}
	switch strings.ToLower(u.Scheme) {
	case "unix":
		p := u.Path
		if p == "" {
			p = u.Opaque
		}
		if p == "" {
			return "", "", false, fmt.Errorf("-xds %q: no socket path (want unix:///run/consul-xds-bridge/xds.sock)", v)
		}
		return "", p, false, nil
	case "dns":
		// gRPC's target form: dns:///HOST:PORT (or dns://RESOLVER/HOST:PORT).
		hostPort, _, _, err := checkHostPort(v, strings.TrimPrefix(u.Path, "/"))
		return hostPort, "", false, err
	case "http", "grpc", "tcp", "https", "grpcs":
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
			return "", "", false, fmt.Errorf("-xds %q: the bridge's xDS address has no path or query (want %s://HOST:PORT)", v, u.Scheme)
		}
		hostPort, _, _, err := checkHostPort(v, u.Host)
		return hostPort, "", u.Scheme == "https" || u.Scheme == "grpcs", err
	default:
		return "", "", false, fmt.Errorf("-xds %q: unknown scheme %q (want HOST:PORT, http://, https://, grpc://, grpcs://, dns:/// or unix://)", v, u.Scheme)
	}
}

func checkHostPort(v, hostPort string) (string, string, bool, error) {
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil || host == "" || port == "" {
		return "", "", false, fmt.Errorf("-xds %q: want HOST:PORT, e.g. 10.0.0.5:18000 or http://bridge.internal:18000", v)
	}
	return hostPort, "", false, nil
}

// normaliseBootstrap turns the -xds values into addresses and every file
// path into an absolute one: Envoy under systemd and gRPC clients resolve
// a relative path against their own working directory (/), not the
// directory the bootstrap was generated in.
func normaliseBootstrap(c *xds.BootstrapConfig, servers []string) error {
	for _, s := range servers {
		hostPort, unixPath, tls, err := xdsAddress(s)
		if err != nil {
			return err
		}
		if tls && c.TLSCAFile == "" {
			return fmt.Errorf("-xds %q asks for TLS: name the CA that signed the bridge's certificate with -tls-ca FILE", s)
		}
		switch {
		case unixPath != "" && c.XDSUnix != "" && c.XDSUnix != unixPath:
			return fmt.Errorf("-xds %q: a second Unix socket (already %s)", s, c.XDSUnix)
		case unixPath != "":
			c.XDSUnix = unixPath
		default:
			c.XDS = append(c.XDS, hostPort)
		}
	}
	for _, p := range []*string{&c.XDSUnix, &c.TLSCAFile, &c.TLSCertFile, &c.TLSKeyFile, &c.MeshCertDir} {
		if *p == "" || filepath.IsAbs(*p) {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("making %q absolute: %w", *p, err)
		}
		*p = abs
	}
	return nil
}
