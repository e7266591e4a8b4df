package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// lockDemo makes sure one demo runs at a time on this machine: a second
// would fight the first over the bridge's ports and, sharing an agent,
// over its service IDs. The lock goes with the process, however it ends.
func lockDemo() (unlock func(), err error) {
	path := filepath.Join(os.TempDir(), "consul-xds-bridge-demo.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another demo is running (pid %s, lock %s); stop it first", string(b[:n]), path)
		}
		return nil, err
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())), 0)
	return func() { _ = f.Truncate(0); f.Close() }, nil
}

// demoIDs are the service IDs the demo registers.
func demoIDs() []string {
	var ids []string
	for _, svc := range demoServices {
		for i := 1; i <= svc.instances; i++ {
			ids = append(ids, fmt.Sprintf("%s-%d", svc.name, i))
		}
	}
	return append(ids, "echo-1", "echo-2")
}

// takenIDs lists the demo's service IDs the agent already has.
func takenIDs(c *api.Client) ([]string, error) {
	services, err := c.Agent().Services()
	if err != nil {
		return nil, err
	}
	var taken []string
	for _, id := range demoIDs() {
		if _, ok := services[id]; ok {
			taken = append(taken, id)
		}
	}
	slices.Sort(taken)
	return taken, nil
}

// withConsulAddress writes a copy of the config beside it (relative paths
// in it keep their meaning) with consul.address set to addr, so the
// bridge talks to the demo's agent whatever the file says.
func withConsulAddress(config, addr string) (string, error) {
	src, err := os.ReadFile(config)
	if err != nil {
		return "", err
	}
	f, diags := hclwrite.ParseConfig(src, config, hcl.InitialPos)
	if diags.HasErrors() {
		return "", fmt.Errorf("%s: %s", config, diags.Error())
	}
	block := f.Body().FirstMatchingBlock("consul", nil)
	if block == nil {
		block = f.Body().AppendNewBlock("consul", nil)
	}
	block.Body().SetAttributeValue("address", cty.StringVal(addr))
	out := filepath.Join(filepath.Dir(config), fmt.Sprintf(".demo-%d-%s", os.Getpid(), filepath.Base(config)))
	if err := os.WriteFile(out, f.Bytes(), 0o600); err != nil {
		return "", err
	}
	return out, nil
}
