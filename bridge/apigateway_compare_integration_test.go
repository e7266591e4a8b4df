package bridge_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// TestAPIGatewayHostnamesMatchConsulXDS: an http-route whose hostnames
// the api-gateway listener's hostname does not all admit (listener
// *.example.com; route a.example.com and evil.other.org) is served for
// the admitted ones only, by the bridge as by Consul 1.15.4's own xDS
// server for the gateway: the route cannot claim another host. Both
// answer the same Host headers, with the listener's port or without
// (Consul lists each domain with the port too; the bridge strips it).
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
	consul := gatewayRoutes(t, agent.GRPCAddr(), "agw", 1)
	ours := gatewayRoutes(t, h.daemon.XDSAddr().String(), "agw", 1)
	if got := consul.answer(9080, "a.example.com:9080"); got != "a.example.com" {
		t.Fatalf("Consul's gateway answers a.example.com:9080 with %q: the reference changed", got)
	}
	sameAnswers(t, consul, ours, 9080, "a.example.com", "a.example.com:9080", "evil.other.org", "evil.other.org:9080", "b.example.com", "b.example.com:9080")
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
