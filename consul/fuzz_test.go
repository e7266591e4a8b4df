package consul

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"
)

// FuzzReadFixture feeds arbitrary JSON to the catalog decoder and the
// normaliser that every Consul response goes through: Consul's answers are
// input the bridge does not control (a buggy agent, a proxy in between), so
// nothing may panic, and whatever decodes must come out sorted.
func FuzzReadFixture(f *testing.F) {
	f.Add([]byte(`{"datacenter":"dc1","services":{"web":[{"Node":{"Node":"n1","Address":"10.0.0.1","Datacenter":"dc1","Meta":{"zone":"a"}},"Service":{"ID":"web-1","Service":"web","Port":80,"Tags":["b","a","a"],"Weights":{"Passing":3,"Warning":1}},"Checks":[{"CheckID":"serfHealth","Status":"passing"},{"CheckID":"_service_maintenance:web-1","Status":"critical"}]}]}}`))
	f.Add([]byte(`{"services":{"db":[null,{"Node":null},{"Service":{"Port":-1}},{"Node":{},"Service":{},"Checks":[null,{"Status":"flapping"}]}]}}`))
	f.Add([]byte(`{"services":{"api":[]},"remote":{"dc2":{"api":[{"Node":{"Node":"n2","Address":"::1"},"Service":{"ID":"api-1","Port":8080}}]}}}`))
	f.Add([]byte(`{"services":{"":[]}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cat, err := ReadFixture(bytes.NewReader(data))
		if err != nil {
			return
		}
		if !slices.IsSortedFunc(cat.Services, func(a, b *Service) int {
			return compareKeys(ServiceKey{a.Datacenter, a.Name}, ServiceKey{b.Datacenter, b.Name})
		}) {
			t.Fatalf("services not sorted: %+v", cat.Services)
		}
		for _, s := range cat.Services {
			if cat.Service(s.Datacenter, s.Name) != s {
				t.Fatalf("lookup of %s@%s fails", s.Name, s.Datacenter)
			}
			for i := 1; i < len(s.Instances); i++ {
				a, b := s.Instances[i-1], s.Instances[i]
				if a.Node > b.Node || (a.Node == b.Node && a.ID > b.ID) {
					t.Fatalf("instances not sorted: %s/%s before %s/%s", a.Node, a.ID, b.Node, b.ID)
				}
			}
		}
	})
}

// FuzzNewService decodes a raw /v1/health/service body, as the watcher does.
func FuzzNewService(f *testing.F) {
	f.Add([]byte(`[{"Node":{"Node":"n1","Address":"10.0.0.1"},"Service":{"ID":"a","Port":1},"Checks":[{"CheckID":"c","Status":"warning"}]}]`))
	f.Add([]byte(`[null]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var entries []*api.ServiceEntry
		if json.Unmarshal(data, &entries) != nil {
			return
		}
		s := NewService("svc", "", 1, entries)
		if !equalService(s, NewService("svc", "", 2, entries)) {
			t.Fatal("the same entries normalise differently")
		}
		for _, in := range s.Instances {
			switch in.Status {
			case StatusPassing, StatusWarning, StatusCritical, StatusMaintenance:
			default:
				t.Fatalf("unknown status %q", in.Status)
			}
		}
	})
}
