package consultest

import (
	"fmt"
	"io"
	"net"
	"strconv"
)

// portFlag is one of the agent's listeners. Every one must be set: an unset
// port falls back to Consul's fixed default and collides with other agents.
type portFlag struct {
	flag string
	udp  bool // DNS and serf also listen on UDP, on the same port number.
}

var portFlags = []portFlag{
	{"http-port", false},
	{"dns-port", true},
	{"grpc-port", false},
	{"grpc-tls-port", false},
	{"serf-lan-port", true},
	{"serf-wan-port", true},
	{"server-port", false},
}

// freePorts returns one free 127.0.0.1 port per portFlags entry, by flag name.
// Every probe socket stays open until all ports are chosen so that no port is
// handed out twice; the agent can still lose a race for one, which Start
// handles by retrying with new ports.
func freePorts() (map[string]int, error) {
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	ports := make(map[string]int, len(portFlags))
	for _, pf := range portFlags {
		for attempt := 0; ; attempt++ {
			if attempt == 20 {
				return nil, fmt.Errorf("no free port for -%s", pf.flag)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			held = append(held, ln)
			port := ln.Addr().(*net.TCPAddr).Port
			if pf.udp {
				pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
				if err != nil {
					continue // TCP free but UDP taken: keep the TCP probe so it is not picked again.
				}
				held = append(held, pc)
			}
			ports[pf.flag] = port
			break
		}
	}
	return ports, nil
}
