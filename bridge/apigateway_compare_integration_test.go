package bridge_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestAPIGatewayHostnamesMatchConsulXDS: an http-route whose hostnames
// the api-gateway listener's hostname does not all admit (listener
// *.example.com; route a.example.com and evil.other.org) is served for
// the admitted ones only, by the bridge as by Consul 1.15.4's own xDS
// server for the gateway: the route cannot claim another host. Each
// domain comes with the listener's port too (a.example.com:9080), as
// Consul's: a client on port 9080 sends it in the Host header.
func TestAPIGatewayHostnamesMatchConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	registerServices(t, agent, &api.AgentServiceRegistration{Name: "web", Port: 9090, Connect: withSidecar()},
		&api.AgentServiceRegistration{Kind: api.ServiceKindAPIGateway, Name: "agw", ID: "agw", Port: 9080})
	writeEntries(t, agent, &api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "web", Protocol: "http"})
	// Written as JSON: this api client's structs carry fields newer than
	// Consul 1.15.4, which refuses them.
	putConfigEntry(t, agent, `{"Kind":"api-gateway","Name":"agw","Listeners":[{"Name":"http","Port":9080,"Protocol":"http","Hostname":"*.example.com"}]}`)
	putConfigEntry(t, agent, `{"Kind":"http-route","Name":"hr","Parents":[{"Kind":"api-gateway","Name":"agw"}],"Hostnames":["a.example.com","evil.other.org"],"Rules":[{"Services":[{"Name":"web"}]}]}`)
	h := startEntriesBridge(t, agent, "")
	domains := func(addr string) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: addr, NodeID: "agw", Cluster: "agw", Mode: adsclient.Delta, InitialFetchTimeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var out []string
		collect := func(s adsclient.State) []string {
			var ds []string
			for _, n := range s.RouteConfigNames() {
				for _, vh := range s.RouteConfig(n).GetVirtualHosts() {
					ds = append(ds, vh.GetDomains()...)
				}
			}
			slices.Sort(ds)
			return ds
		}
		if _, err := c.Wait(ctx, func(s adsclient.State) bool { out = collect(s); return len(out) > 0 }); err != nil {
			t.Fatalf("%s: no virtual hosts for agw: %v\n%s", addr, err, c.Snapshot())
		}
		return out
	}
	consul, ours := domains(agent.GRPCAddr()), domains(h.daemon.XDSAddr().String())
	if want := []string{"a.example.com", "a.example.com:9080"}; !slices.Equal(consul, want) {
		t.Fatalf("Consul's own domains %v, want %v: the reference changed", consul, want)
	}
	if !slices.Equal(ours, consul) {
		t.Errorf("the bridge's domains %v; Consul's %v", ours, consul)
	}
}

// putConfigEntry writes a config entry's JSON to agent's Consul.
func putConfigEntry(t *testing.T, agent *consultest.Agent, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, "http://"+agent.HTTPAddr()+"/v1/config", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/config %s: %d %s", body, resp.StatusCode, b)
	}
}
